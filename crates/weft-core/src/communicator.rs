//! The Communicator: one rank's handle on its peers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_bootstrap::Bootstrap;
use weft_gpu::{AllocKind, Device, DeviceMemory, GpuError, ImportedMemory, Sharing, UserAllocation};
use weft_types::{DeviceErrorCode, DeviceErrorRecord, SemaphoreDeviceHandle, WaitContext, WaitOp};

use crate::channel::{MemoryChannel, MemoryChannelConfig};
use crate::descriptor::{MemoryDescriptor, MemoryHandle};
use crate::env::Env;
use crate::error::{ConnectError, DeviceFailure, Error, RegisterMemoryError};
use crate::fd_passing::{FdServer, fetch_fd};
use crate::identity::ProcessIdentity;
use crate::memory::{FdExport, RegisteredMemory, RemoteMemory, UserRegistration};
use crate::semaphore::{Semaphore, TokenPool};
use crate::topology::{NodeLayout, PeerInfo, Topology};
use crate::wire::{put_short_bytes, short_bytes};
use weft_bootstrap::codec::{CodecError, Reader, Writer};

/// Bootstrap tag of every setup message; per peer, both sides issue setup calls in the same
/// order, so one ordered stream per peer pairs them.
const SETUP_TAG: u32 = 0x5746_0001;
/// Bootstrap tag of [`Communicator::settle_with`]'s handshakes.
const SETTLE_TAG: u32 = 0x5746_0002;
/// Bytes of the token pool (one VMM granule on Hopper: 262144 semaphore tokens).
const TOKEN_POOL_BYTES: usize = 2 << 20;
/// Bound of a cross-process file-descriptor fetch.
const FD_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// One rank's communicator. Cheap to clone.
#[derive(Clone)]
pub struct Communicator {
    inner: Arc<Inner>,
}

struct Inner {
    rank: usize,
    bootstrap: Arc<dyn Bootstrap>,
    device: Device,
    env: Env,
    topology: Topology,
    fd_server: Arc<FdServer>,
    /// In device memory: waiting threads poll it to give up early once anything failed, and
    /// polling host-pinned memory from thousands of spinning threads would flood PCIe.
    error_record: DeviceMemory,
    tokens: TokenPool,
    /// Devices of same-process peers (for granting them access to our memory).
    local_peer_devices: Vec<Device>,
    /// Why each rank's memory cannot be mapped here (None: it can).
    unreachable: Vec<Option<String>>,
    /// Why each rank's memory cannot be mapped by this rank's proxy, which may reach peers of
    /// other virtual nodes (None: it can).
    proxy_unreachable: Vec<Option<String>>,
    /// Cross-process mappings, keyed by (owner rank, owner base address, export identity): an
    /// address the owner freed and allocated again is a new export, never the old mapping.
    imports: Mutex<HashMap<(usize, u64, u64), Arc<ImportedMemory>>>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.rank)
            .field("world_size", &self.world_size())
            .field("device", &self.inner.device.ordinal())
            .finish()
    }
}

impl Communicator {
    /// Creates this rank's communicator: gathers every rank's host, process and GPU, starts the
    /// fd server, allocates the token pool and the device error record. Collective: every rank
    /// of the bootstrap must call it.
    pub fn new(bootstrap: Arc<dyn Bootstrap>, device: Device, env: Env) -> Result<Self, Error> {
        let rank = bootstrap.rank();
        let gpu = |source| Error::Gpu { rank, source };
        let me = PeerInfo {
            rank,
            device_ordinal: device.ordinal(),
            pci_bus_id: device.pci_bus_id().map_err(gpu)?,
            identity: ProcessIdentity::current(),
        };
        let encoded = me.encode().map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
        let gathered = bootstrap.all_gather(&encoded).map_err(|source| Error::Bootstrap { rank, source })?;
        let mut peers = Vec::with_capacity(gathered.len());
        for (peer, bytes) in gathered.iter().enumerate() {
            peers.push(PeerInfo::decode(bytes).map_err(|source| ConnectError::Descriptor { rank, peer, source })?);
        }
        let topology =
            Topology::new(rank, peers, NodeLayout { ranks_per_node: env.ranks_per_node, share_gpus: env.share_gpus })
                .map_err(|detail| Error::InvalidArgument { rank, detail })?;
        let mut local_peer_devices = Vec::new();
        for p in topology.peers() {
            if p.rank != rank && topology.same_process(p.rank) && p.device_ordinal != device.ordinal() {
                local_peer_devices.push(Device::new(p.device_ordinal).map_err(gpu)?);
            }
        }
        let unreachable = topology.peers().iter().map(|p| reachability(&device, &topology, p, false)).collect();
        let proxy_unreachable = topology.peers().iter().map(|p| reachability(&device, &topology, p, true)).collect();
        let fd_server = Arc::new(
            FdServer::start()
                .map_err(|e| Error::InvalidArgument { rank, detail: format!("cannot start the fd server: {e}") })?,
        );
        let error_record =
            DeviceMemory::alloc(&device, size_of::<DeviceErrorRecord>(), AllocKind::Legacy).map_err(gpu)?;
        error_record.write_pod(0, &[DeviceErrorRecord::default()]).map_err(gpu)?;
        let pool = Arc::new(DeviceMemory::alloc(&device, TOKEN_POOL_BYTES, env.alloc).map_err(gpu)?);
        pool.fill(0, pool.len(), 0).map_err(gpu)?;
        let exporter = Exporter {
            rank,
            device: &device,
            fd_server: &fd_server,
            local_peer_devices: &local_peer_devices,
            identity: &me.identity,
        };
        let tokens_memory = exporter.register(Arc::clone(&pool), 0, pool.len())?;
        let inner = Inner {
            rank,
            bootstrap,
            device,
            env,
            topology,
            fd_server,
            error_record,
            tokens: TokenPool::new(tokens_memory),
            local_peer_devices,
            unreachable,
            proxy_unreachable,
            imports: Mutex::default(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.inner.topology.world_size()
    }

    /// This rank's GPU.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The SMs this rank's kernels may count on when all their blocks must be resident at once
    /// (they wait for each other or for peers): the GPU's SMs, or on a GPU shared by several
    /// ranks (`WEFT_SHARE_GPUS`) an even split of them rounded down to a power of two, which
    /// leaves SMs spare for whatever else runs there (132 SMs: 64 each for 2 ranks, 32 for 3
    /// or 4). The same on every rank of GPUs of one model.
    pub fn resident_sms(&self) -> Result<u32, Error> {
        let sms = self.inner.device.sm_count().map_err(|source| Error::Gpu { rank: self.rank(), source })?;
        let sharing = u32::try_from(self.inner.topology.most_ranks_per_gpu()).unwrap_or(u32::MAX);
        Ok(if self.shares_gpu() { 1 << (sms / sharing).max(1).ilog2() } else { sms })
    }

    /// Where every rank lives.
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// The configuration in force.
    pub fn env(&self) -> &Env {
        &self.inner.env
    }

    /// The bootstrap (for host-side agreement between ranks).
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.inner.bootstrap
    }

    /// Whether this rank can map `peer`'s GPU memory (same process, or same host with peer
    /// access); the error says why not.
    pub fn can_map(&self, peer: usize) -> Result<(), String> {
        match self.inner.unreachable.get(peer) {
            Some(None) => Ok(()),
            Some(Some(reason)) => Err(reason.clone()),
            None => Err(format!("rank {peer} is outside a world of {}", self.world_size())),
        }
    }

    /// Host-side barrier over every rank.
    pub fn barrier(&self) -> Result<(), Error> {
        self.inner.bootstrap.barrier().map_err(|source| Error::Bootstrap { rank: self.rank(), source })
    }

    /// Before a launch in which every rank's kernel waits for the others: on a GPU shared by
    /// several ranks (`WEFT_SHARE_GPUS`), waits until every rank gets here (a barrier), since
    /// module loads, allocations and memsets serialise a GPU's streams, and one rank still
    /// setting up would hold back a peer's kernel that waits for it. Nothing when every rank
    /// has a GPU of its own (only on a shared GPU, a test layout, does a call wait for the
    /// other ranks' host threads). Collective.
    pub fn settle_before_launch(&self) -> Result<(), Error> {
        if self.shares_gpu() { self.barrier() } else { Ok(()) }
    }

    /// [`Communicator::settle_before_launch`] for a launch whose kernel waits only for
    /// `peers`, each of which makes the matching call: a handshake with each of them. It does
    /// not cover the other ranks sharing the GPU: a module load or allocation there still holds
    /// this launch back, so callers load their kernels before any rank can launch.
    pub fn settle_with(&self, peers: impl Iterator<Item = usize> + Clone) -> Result<(), Error> {
        if !self.shares_gpu() {
            return Ok(());
        }
        let bootstrap_error = |source| Error::Bootstrap { rank: self.rank(), source };
        for peer in peers.clone() {
            self.inner.bootstrap.send(peer, SETTLE_TAG, &[]).map_err(bootstrap_error)?;
        }
        for peer in peers {
            self.inner.bootstrap.recv(peer, SETTLE_TAG).map_err(bootstrap_error)?;
        }
        Ok(())
    }

    /// Whether some GPU carries several ranks of this communicator (`WEFT_SHARE_GPUS`, or
    /// virtual nodes on fewer GPUs).
    pub fn shares_gpu(&self) -> bool {
        self.inner.topology.most_ranks_per_gpu() > 1
    }

    /// Allocates communication memory on this rank's GPU with the configured allocation kind.
    pub fn alloc(&self, len: usize) -> Result<Arc<DeviceMemory>, Error> {
        DeviceMemory::alloc(&self.inner.device, len, self.inner.env.alloc)
            .map(Arc::new)
            .map_err(|source| Error::Gpu { rank: self.rank(), source })
    }

    /// Registers a whole allocation so peers can map it.
    pub fn register(&self, memory: Arc<DeviceMemory>) -> Result<RegisteredMemory, Error> {
        let len = memory.len();
        self.register_range(memory, 0, len)
    }

    /// Registers `len` bytes at `offset` of an allocation.
    pub fn register_range(
        &self,
        memory: Arc<DeviceMemory>,
        offset: usize,
        len: usize,
    ) -> Result<RegisteredMemory, Error> {
        let me = self.identity();
        self.exporter(&me).register(memory, offset, len)
    }

    /// Registers a whole application allocation (a collective's user buffer) so peers may map
    /// it; see [`UserRegistration`]. Refused for allocations no peer could map.
    pub fn register_user(&self, allocation: &UserAllocation) -> Result<UserRegistration, Error> {
        let me = self.identity();
        self.exporter(&me).register_user(allocation)
    }

    fn identity(&self) -> ProcessIdentity {
        let i = &self.inner;
        i.topology.peer(i.rank).map(|p| p.identity).unwrap_or_else(ProcessIdentity::current)
    }

    fn exporter<'a>(&'a self, identity: &'a ProcessIdentity) -> Exporter<'a> {
        let i = &self.inner;
        Exporter {
            rank: i.rank,
            device: &i.device,
            fd_server: &i.fd_server,
            local_peer_devices: &i.local_peer_devices,
            identity,
        }
    }

    /// Sends `bytes` to `peer` and returns what `peer` sent in its matching call: the setup
    /// exchange of the layers above (weft-net's PortChannels). Both ranks must call it.
    pub fn exchange(&self, peer: usize, bytes: &[u8]) -> Result<Vec<u8>, Error> {
        self.check_peer(peer)?;
        self.send(peer, bytes)?;
        self.recv(peer)
    }

    /// Claims a fresh zeroed token of the pool: its slot index and device address (the inbound
    /// token of a weft-net PortChannel, which the peer's proxy stores).
    pub fn claim_token(&self) -> Result<(usize, u64), Error> {
        let pool = &self.inner.tokens;
        let slot = pool.claim().ok_or_else(|| Error::InvalidArgument {
            rank: self.rank(),
            detail: "semaphore token pool exhausted".into(),
        })?;
        Ok((slot, pool.address(slot)))
    }

    /// The token pool's registered memory (its descriptor lets peers map a token).
    pub fn token_pool(&self) -> &RegisteredMemory {
        self.inner.tokens.memory()
    }

    fn send(&self, peer: usize, bytes: &[u8]) -> Result<(), Error> {
        self.inner
            .bootstrap
            .send(peer, SETUP_TAG, bytes)
            .map_err(|source| Error::Bootstrap { rank: self.rank(), source })
    }

    fn recv(&self, peer: usize) -> Result<Vec<u8>, Error> {
        self.inner.bootstrap.recv(peer, SETUP_TAG).map_err(|source| Error::Bootstrap { rank: self.rank(), source })
    }

    fn check_peer(&self, peer: usize) -> Result<(), Error> {
        if peer >= self.world_size() || peer == self.rank() {
            return Err(Error::InvalidArgument {
                rank: self.rank(),
                detail: format!("peer {peer} (world of {}, self is {})", self.world_size(), self.rank()),
            });
        }
        Ok(())
    }

    /// Maps a descriptor received from `peer` into this rank's address space. Mappings are
    /// cached per export (owner, base address, export identity): importing a descriptor of the
    /// same export again returns the same mapping.
    pub fn import(&self, peer: usize, d: &MemoryDescriptor) -> Result<RemoteMemory, Error> {
        self.import_as(peer, d, false)
    }

    /// Maps a descriptor received from `peer` for this rank's proxy (weft-net): unlike kernels,
    /// the proxy may map the memory of peers in other virtual nodes of this host (its copy engine
    /// is the emulated NIC between them). Never hand the result to a kernel.
    pub fn import_for_proxy(&self, peer: usize, d: &MemoryDescriptor) -> Result<RemoteMemory, Error> {
        self.import_as(peer, d, true)
    }

    fn import_as(&self, peer: usize, d: &MemoryDescriptor, proxy: bool) -> Result<RemoteMemory, Error> {
        let rank = self.rank();
        let i = &self.inner;
        let len = usize::try_from(d.len).map_err(|_| Error::InvalidArgument { rank, detail: "length".into() })?;
        if d.owner_rank != peer {
            return Err(Error::InvalidArgument {
                rank,
                detail: format!("descriptor from peer {peer} claims owner {}", d.owner_rank),
            });
        }
        let refused = if proxy { &i.proxy_unreachable } else { &i.unreachable };
        if let Some(reason) = refused.get(peer).cloned().flatten() {
            return Err(ConnectError::NoTransport { rank, peer, reason }.into());
        }
        if d.identity == i.topology.peer(rank).map(|p| p.identity).unwrap_or_else(ProcessIdentity::current) {
            // Same process: the owner granted our device access at registration.
            return Ok(RemoteMemory::new(d.base + d.offset, len, peer, None));
        }
        let identity = match &d.handle {
            MemoryHandle::PosixFd { export_id, .. } => *export_id,
            // A legacy IPC handle names one allocation; fold its bytes (FNV-1a) into the key.
            MemoryHandle::Legacy(h) => {
                h.0.iter().fold(0xcbf2_9ce4_8422_2325u64, |x, &b| (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
            }
        };
        let key = (peer, d.base, identity);
        if let Some(mapping) = lock(&i.imports).get(&key) {
            return Ok(RemoteMemory::new(mapping.ptr() + d.offset, len, peer, Some(Arc::clone(mapping))));
        }
        let mapped_len = usize::try_from(d.mapped_len)
            .map_err(|_| Error::InvalidArgument { rank, detail: "mapped length".into() })?;
        let mapping = match &d.handle {
            MemoryHandle::PosixFd { socket, export_id, secret } => {
                let fd = fetch_fd(socket, *secret, *export_id, FD_FETCH_TIMEOUT)
                    .map_err(|e| ConnectError::FdFetch { rank, peer, detail: e.to_string() })?;
                ImportedMemory::from_fd(&i.device, fd, mapped_len)
            }
            MemoryHandle::Legacy(handle) => ImportedMemory::from_legacy(&i.device, handle, mapped_len),
        }
        .map_err(|source| ConnectError::Map { rank, peer, source })?;
        let mapping = Arc::new(mapping);
        lock(&i.imports).insert(key, Arc::clone(&mapping));
        Ok(RemoteMemory::new(mapping.ptr() + d.offset, len, peer, Some(mapping)))
    }

    /// Drops the cached mappings of `peer`'s allocation at `base` (the peer freed it); users of
    /// a mapping keep it alive until they drop it.
    pub fn forget_import(&self, peer: usize, base: u64) {
        lock(&self.inner.imports).retain(|&(owner, at, _), _| owner != peer || at != base);
    }

    /// Sends `local`'s descriptor to `peer`, receives the peer's counterpart and maps it.
    /// Pairwise: `peer` must make the matching call.
    pub fn connect_memory(&self, peer: usize, local: &RegisteredMemory) -> Result<RemoteMemory, Error> {
        self.check_peer(peer)?;
        let rank = self.rank();
        let bytes = local.descriptor().encode().map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
        self.send(peer, &bytes)?;
        let theirs = self.recv(peer)?;
        let d = MemoryDescriptor::decode(&theirs).map_err(|source| ConnectError::Descriptor { rank, peer, source })?;
        self.import(peer, &d)
    }

    /// What a wait on a handle to `peer` needs: the error record, the bound, the ranks.
    pub fn wait_context(&self, peer: usize, timeout: Option<Duration>) -> WaitContext {
        let bound = timeout.unwrap_or(self.inner.env.device_timeout);
        WaitContext {
            error: self.inner.error_record.ptr(),
            timeout_ns: u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX).max(1),
            rank: i32::try_from(self.rank()).unwrap_or(i32::MAX),
            peer: i32::try_from(peer).unwrap_or(i32::MAX),
        }
    }

    /// Creates a semaphore with `peer`. Pairwise: `peer` must make the matching call.
    pub fn semaphore(&self, peer: usize, timeout: Option<Duration>) -> Result<Semaphore, Error> {
        self.check_peer(peer)?;
        let rank = self.rank();
        let pool = &self.inner.tokens;
        let exhausted = || Error::InvalidArgument { rank, detail: "semaphore token pool exhausted".into() };
        let inbound = pool.claim().ok_or_else(exhausted)?;
        let expected = pool.claim().ok_or_else(exhausted)?;
        let descriptor =
            pool.memory().descriptor().encode().map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
        let mut w = Writer::new();
        w.put_u32(u32::try_from(inbound).map_err(|_| exhausted())?);
        put_short_bytes(&mut w, &descriptor).map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
        self.send(peer, &w.into_inner())?;
        let theirs = self.recv(peer)?;
        let malformed = |source| ConnectError::Descriptor { rank, peer, source };
        let mut r = Reader::new(&theirs);
        let remote_slot = r.u32().map_err(malformed)? as u64;
        let remote_pool = MemoryDescriptor::decode(short_bytes(&mut r).map_err(malformed)?).map_err(malformed)?;
        r.finish().map_err(malformed)?;
        if (remote_slot + 1) * 8 > remote_pool.len {
            return Err(ConnectError::Descriptor {
                rank,
                peer,
                source: CodecError::InvalidValue { field: "semaphore token slot", value: remote_slot },
            }
            .into());
        }
        let remote = self.import(peer, &remote_pool)?;
        let handle = SemaphoreDeviceHandle {
            inbound: pool.address(inbound),
            remote_inbound: remote.ptr() + 8 * remote_slot,
            expected: pool.address(expected),
            wait: self.wait_context(peer, timeout),
        };
        Ok(Semaphore::new(peer, handle, remote, pool.memory().clone()))
    }

    /// Creates a MemoryChannel with `peer`: `buffer` is this rank's side (the peer's matching
    /// call supplies the `dst` this rank writes into), `packets` an optional LL packet buffer
    /// (both sides must pass one or neither). Pairwise: `peer` must make the matching call.
    pub fn memory_channel(
        &self,
        peer: usize,
        buffer: &RegisteredMemory,
        packets: Option<&RegisteredMemory>,
        config: MemoryChannelConfig,
    ) -> Result<MemoryChannel, Error> {
        self.check_peer(peer)?;
        let remote = self.connect_memory(peer, buffer)?;
        let packet_pair = match packets {
            Some(mine) => Some((mine.clone(), self.connect_memory(peer, mine)?)),
            None => None,
        };
        let semaphore = self.semaphore(peer, config.timeout)?;
        Ok(MemoryChannel::new(semaphore, buffer.clone(), remote, packet_pair))
    }

    /// The first failure a kernel of this communicator recorded, if any.
    pub fn device_failure(&self) -> Option<DeviceFailure> {
        let rec: DeviceErrorRecord = self.inner.error_record.read_pod(0).ok()?;
        if rec.code == DeviceErrorCode::None as u32 {
            return None;
        }
        let op = match WaitOp::from_raw(rec.op) {
            Some(WaitOp::SemaphoreWait) => "semaphore wait",
            Some(WaitOp::Ll8Read) => "LL8 packet read",
            Some(WaitOp::Ll16Read) => "LL16 packet read",
            Some(WaitOp::Ll128Read) => "LL128 line read",
            Some(WaitOp::LlToken) => "LL buffer release by the peer",
            Some(WaitOp::FifoPush) => "FIFO push into a full ring",
            Some(WaitOp::FifoSync) => "FIFO sync on a command's consumption",
            Some(WaitOp::ExecBarrier) => "plan executor barrier of the rank's thread blocks",
            Some(WaitOp::ExecStep) => "plan executor wait for another thread block's operation",
            Some(WaitOp::RingHandoff) => "port ring hand-off between the rank's blocks",
            Some(WaitOp::EpBarrier) => "expert-parallel barrier",
            Some(WaitOp::EpDispatchChannel) => "EP dispatch: a source rank's channel word (expected = channel)",
            Some(WaitOp::EpDispatchTail) => "EP dispatch: a source rank's tokens (expected = tokens of the channel)",
            Some(WaitOp::EpCombineTail) => "EP combine: the rows of the rank holding the token's experts",
            Some(WaitOp::EpLlCount) => "EP low-latency dispatch: a source rank's count (expected = expert)",
            Some(WaitOp::EpLlFlag) => "EP low-latency combine: an expert's rows (expected = expert)",
            Some(WaitOp::EpRailRows) => {
                "EP dispatch between nodes: a source rank's rows (expected = its signal's share)"
            }
            Some(WaitOp::EpRailPartials) => {
                "EP combine between nodes: a forwarder's partial sums (expected = its signal's share)"
            }
            Some(WaitOp::EpRailPacked) => {
                "EP dispatch between nodes: this rank's pack reaching a chunk's last token (expected = tokens packed)"
            }
            Some(WaitOp::TwoPhaseNode) => "2PH: a node member's piece or finished shard (expected = the round's flag)",
            Some(WaitOp::TwoPhaseRail) => "2PH: another node's partial (expected = its signal's count)",
            Some(WaitOp::GinSignal) => "GIN wait_signal (peer = the signal's index, expected = its value)",
            Some(WaitOp::GinCounter) => "GIN wait_counter (peer = the counter's index, expected = its value)",
            Some(WaitOp::GinBarrier) => "GIN barrier (peer = its signal's index, expected = arrivals)",
            Some(WaitOp::GinStaging) => {
                "GIN put_value: a free staging slot (expected = slots, observed = the last tried)"
            }
            None => "unknown operation",
        };
        Some(DeviceFailure { rank: rec.rank, peer: rec.peer, op, expected: rec.expected, observed: rec.observed })
    }

    /// `Err(PeerTimeout)` if a kernel recorded a failure.
    pub fn check_device(&self) -> Result<(), Error> {
        self.device_failure().map_or(Ok(()), |f| Err(Error::PeerTimeout(f)))
    }

    /// Clears the device error record (after the failure was handled; no kernel may be running).
    pub fn clear_device_failure(&self) -> Result<(), Error> {
        self.inner
            .error_record
            .write_pod(0, &[DeviceErrorRecord::default()])
            .map_err(|source| Error::Gpu { rank: self.rank(), source })
    }
}

/// Why `peer`'s GPU memory cannot be mapped by `device`, or None when it can; `across_nodes`:
/// virtual nodes of one host do not separate (the proxy's view).
fn reachability(device: &Device, topology: &Topology, peer: &PeerInfo, across_nodes: bool) -> Option<String> {
    if !topology.same_host(peer.rank) {
        return Some("peer is on another host and MemoryChannels need NVLink/PCIe peer mappings".into());
    }
    if !across_nodes && !topology.same_node(peer.rank) {
        return Some(format!(
            "peer is in another virtual node (WEFT_RANKS_PER_NODE={}): it needs a network transport",
            topology.ranks_per_node().unwrap_or(0)
        ));
    }
    let own_bus = device.pci_bus_id().ok()?;
    if peer.pci_bus_id == own_bus {
        return None;
    }
    match Device::by_pci_bus_id(&peer.pci_bus_id).and_then(|theirs| device.can_access_peer(&theirs)) {
        Ok(true) => None,
        Ok(false) => Some(format!("GPU {} cannot map memory of GPU {} (no peer access)", own_bus, peer.pci_bus_id)),
        Err(e) => Some(format!("GPU {} is not visible to this process: {e}", peer.pci_bus_id)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Entries are inserted whole; a poisoned map is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What registration needs of this rank: where exports are offered and who must be granted
/// access.
struct Exporter<'a> {
    rank: usize,
    device: &'a Device,
    fd_server: &'a Arc<FdServer>,
    local_peer_devices: &'a [Device],
    identity: &'a ProcessIdentity,
}

/// The allocation a registration describes: weft's own or the application's.
enum Source<'a> {
    Owned(&'a DeviceMemory),
    User(&'a UserAllocation),
}

impl Source<'_> {
    fn grant_access(&self, peer: &Device) -> Result<(), GpuError> {
        match self {
            Source::Owned(m) => m.grant_access(peer),
            Source::User(a) => a.grant_access(peer),
        }
    }

    /// The allocation's base address and mapped length.
    fn range(&self) -> (u64, u64) {
        match self {
            Source::Owned(m) => (m.ptr(), m.mapped_len() as u64),
            Source::User(a) => (a.key().base, a.key().size),
        }
    }

    fn sharing(&self) -> Sharing {
        match self {
            Source::Owned(m) if m.is_vmm() => Sharing::PosixFd,
            Source::Owned(_) => Sharing::LegacyIpc,
            Source::User(a) => a.sharing(),
        }
    }
}

impl Exporter<'_> {
    /// Refuses memory of another GPU than the communicator's.
    fn check_device(&self, memory_device: &Device) -> Result<(), Error> {
        if memory_device.ordinal() == self.device.ordinal() {
            return Ok(());
        }
        Err(RegisterMemoryError::WrongDevice {
            rank: self.rank,
            memory_device: memory_device.ordinal(),
            comm_device: self.device.ordinal(),
        }
        .into())
    }

    fn register(&self, memory: Arc<DeviceMemory>, offset: usize, len: usize) -> Result<RegisteredMemory, Error> {
        let rank = self.rank;
        self.check_device(memory.device())?;
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > memory.len()) {
            return Err(Error::InvalidArgument {
                rank,
                detail: format!("register {offset}+{len} of an allocation of {} bytes", memory.len()),
            });
        }
        let (descriptor, export) = self.describe(&Source::Owned(&memory), offset as u64, len as u64)?;
        Ok(RegisteredMemory::new(memory, offset, len, descriptor, export))
    }

    fn register_user(&self, allocation: &UserAllocation) -> Result<UserRegistration, Error> {
        let rank = self.rank;
        self.check_device(allocation.device())?;
        let key = allocation.key();
        if allocation.sharing() == Sharing::None || key.size == 0 {
            return Err(Error::InvalidArgument {
                rank,
                detail: format!("the allocation at {:#x} cannot be shared with other processes", key.base),
            });
        }
        let (descriptor, export) = self.describe(&Source::User(allocation), 0, key.size)?;
        Ok(UserRegistration::new(key, descriptor, export))
    }

    /// Grants same-process peers access and exports the allocation: its descriptor and, for
    /// VMM memory, the fd offered on the fd server.
    fn describe(
        &self,
        source: &Source<'_>,
        offset: u64,
        len: u64,
    ) -> Result<(MemoryDescriptor, Option<FdExport>), Error> {
        let rank = self.rank;
        let gpu = |source| RegisterMemoryError::Gpu { rank, source };
        for peer in self.local_peer_devices {
            source.grant_access(peer).map_err(gpu)?;
        }
        let (handle, export) = match (source, source.sharing()) {
            (_, Sharing::PosixFd) => {
                let fd = match source {
                    Source::Owned(m) => m.export_fd(),
                    Source::User(a) => a.export_fd(),
                }
                .map_err(gpu)?;
                let id = self.fd_server.export(fd);
                let handle = MemoryHandle::PosixFd {
                    socket: self.fd_server.name().to_vec(),
                    export_id: id,
                    secret: self.fd_server.secret(),
                };
                (handle, Some(FdExport { server: Arc::clone(self.fd_server), id }))
            }
            (Source::Owned(m), _) => (MemoryHandle::Legacy(m.legacy_ipc_handle().map_err(gpu)?), None),
            (Source::User(a), _) => (MemoryHandle::Legacy(a.legacy_ipc_handle().map_err(gpu)?), None),
        };
        let (base, mapped_len) = source.range();
        let descriptor = MemoryDescriptor {
            owner_rank: rank,
            device_ordinal: self.device.ordinal(),
            identity: *self.identity,
            base,
            mapped_len,
            offset,
            len,
            handle,
        };
        Ok((descriptor, export))
    }
}

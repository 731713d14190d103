//! Registered memory (ours, described for peers; allocated by weft or by the application) and
//! remote memory (a peer's, mapped here).

use std::fmt;
use std::sync::Arc;

use weft_gpu::{AllocationKey, DeviceMemory, DevicePtr, ImportedMemory};

use crate::descriptor::MemoryDescriptor;
use crate::fd_passing::FdServer;

/// A range of this rank's device memory that peers may map. Cloning is cheap; the allocation
/// (and its export to peers) lives until the last clone drops.
#[derive(Clone)]
pub struct RegisteredMemory {
    inner: Arc<Registered>,
}

struct Registered {
    memory: Arc<DeviceMemory>,
    offset: usize,
    len: usize,
    descriptor: MemoryDescriptor,
    _export: Option<FdExport>,
}

/// A file descriptor offered on this rank's fd server; withdrawn on drop.
pub(crate) struct FdExport {
    pub(crate) server: Arc<FdServer>,
    pub(crate) id: u64,
}

impl Drop for FdExport {
    fn drop(&mut self) {
        self.server.withdraw(self.id);
    }
}

impl fmt::Debug for RegisteredMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredMemory")
            .field("ptr", &format_args!("{:#x}", self.ptr()))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl RegisteredMemory {
    pub(crate) fn new(
        memory: Arc<DeviceMemory>,
        offset: usize,
        len: usize,
        descriptor: MemoryDescriptor,
        export: Option<FdExport>,
    ) -> Self {
        Self { inner: Arc::new(Registered { memory, offset, len, descriptor, _export: export }) }
    }

    /// Device address of the registered range.
    pub fn ptr(&self) -> DevicePtr {
        self.inner.memory.ptr() + self.inner.offset as u64
    }

    /// Bytes in the registered range.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// True for an empty range (registration refuses those, so never in practice).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The underlying allocation.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        &self.inner.memory
    }

    /// What peers receive.
    pub fn descriptor(&self) -> &MemoryDescriptor {
        &self.inner.descriptor
    }
}

/// A whole application allocation registered so peers may map it (the buffers handed to
/// collectives). The application keeps the memory alive; weft never frees it.
pub struct UserRegistration {
    key: AllocationKey,
    descriptor: MemoryDescriptor,
    _export: Option<FdExport>,
}

impl fmt::Debug for UserRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserRegistration").field("key", &self.key).finish()
    }
}

impl UserRegistration {
    pub(crate) fn new(key: AllocationKey, descriptor: MemoryDescriptor, export: Option<FdExport>) -> Self {
        Self { key, descriptor, _export: export }
    }

    /// The allocation's identity.
    pub fn key(&self) -> AllocationKey {
        self.key
    }

    /// What peers receive (the whole allocation: offset 0, its full length).
    pub fn descriptor(&self) -> &MemoryDescriptor {
        &self.descriptor
    }
}

/// A peer's registered memory as this rank addresses it.
#[derive(Clone)]
pub struct RemoteMemory {
    ptr: DevicePtr,
    len: usize,
    owner: usize,
    /// Keeps a cross-process mapping alive (None: same process, plain pointer).
    _mapping: Option<Arc<ImportedMemory>>,
}

impl fmt::Debug for RemoteMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMemory")
            .field("owner", &self.owner)
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl RemoteMemory {
    pub(crate) fn new(ptr: DevicePtr, len: usize, owner: usize, mapping: Option<Arc<ImportedMemory>>) -> Self {
        Self { ptr, len, owner, _mapping: mapping }
    }

    /// Device address (valid on this rank's GPU) of the peer's range.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rank owning the memory.
    pub fn owner(&self) -> usize {
        self.owner
    }
}

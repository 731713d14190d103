//! Device-to-device semaphores: a pair of monotonic `u64` tokens per direction, allocated from
//! the communicator's token pool (registered device memory, zeroed once, never reset).

use std::sync::atomic::{AtomicUsize, Ordering};

use weft_types::SemaphoreDeviceHandle;

use crate::memory::{RegisteredMemory, RemoteMemory};

/// Slots of 8 bytes in a communicator's token pool.
#[derive(Debug)]
pub(crate) struct TokenPool {
    memory: RegisteredMemory,
    next: AtomicUsize,
}

impl TokenPool {
    pub(crate) fn new(memory: RegisteredMemory) -> Self {
        Self { memory, next: AtomicUsize::new(0) }
    }

    pub(crate) fn memory(&self) -> &RegisteredMemory {
        &self.memory
    }

    /// Claims a fresh zeroed slot; `None` when the pool is exhausted.
    pub(crate) fn claim(&self) -> Option<usize> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed);
        (slot < self.memory.len() / 8).then_some(slot)
    }

    /// Device address of slot `slot`.
    pub(crate) fn address(&self, slot: usize) -> u64 {
        self.memory.ptr() + 8 * slot as u64
    }
}

/// One side of a semaphore between this rank and a peer.
#[derive(Clone, Debug)]
pub struct Semaphore {
    peer: usize,
    handle: SemaphoreDeviceHandle,
    /// Keeps the peer's token memory mapped while the handle is in use.
    _remote: RemoteMemory,
    /// Keeps our token memory alive.
    _local: RegisteredMemory,
}

impl Semaphore {
    pub(crate) fn new(
        peer: usize,
        handle: SemaphoreDeviceHandle,
        remote: RemoteMemory,
        local: RegisteredMemory,
    ) -> Self {
        Self { peer, handle, _remote: remote, _local: local }
    }

    /// The peer.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// Plain handle for kernels; valid while `self` lives.
    pub fn device_handle(&self) -> SemaphoreDeviceHandle {
        self.handle
    }
}

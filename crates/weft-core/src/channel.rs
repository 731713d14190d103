//! MemoryChannel: this rank's buffer, the peer's buffer mapped here, LL packet buffers both
//! ways, and a semaphore, handed to kernels as one `MemoryChannelDeviceHandle`.

use std::time::Duration;

use weft_types::MemoryChannelDeviceHandle;

use crate::memory::{RegisteredMemory, RemoteMemory};
use crate::semaphore::Semaphore;

/// Options of a channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryChannelConfig {
    /// Bound of the channel's device-side waits; `None` uses `WEFT_TIMEOUT`.
    pub timeout: Option<Duration>,
}

/// A MemoryChannel to one peer. Holding it keeps every buffer its handle points at alive.
#[derive(Clone, Debug)]
pub struct MemoryChannel {
    handle: MemoryChannelDeviceHandle,
    semaphore: Semaphore,
    _local: RegisteredMemory,
    _remote: RemoteMemory,
    _packets: Option<(RegisteredMemory, RemoteMemory)>,
}

impl MemoryChannel {
    pub(crate) fn new(
        semaphore: Semaphore,
        local: RegisteredMemory,
        remote: RemoteMemory,
        packets: Option<(RegisteredMemory, RemoteMemory)>,
    ) -> Self {
        let (packet_buffer, remote_packet_buffer) =
            packets.as_ref().map_or((0, 0), |(mine, theirs)| (mine.ptr(), theirs.ptr()));
        let handle = MemoryChannelDeviceHandle {
            semaphore: semaphore.device_handle(),
            dst: remote.ptr(),
            src: local.ptr(),
            packet_buffer,
            remote_packet_buffer,
        };
        Self { handle, semaphore, _local: local, _remote: remote, _packets: packets }
    }

    /// The peer.
    pub fn peer(&self) -> usize {
        self.semaphore.peer()
    }

    /// Plain handle for kernels; valid while `self` lives.
    pub fn device_handle(&self) -> MemoryChannelDeviceHandle {
        self.handle
    }

    /// Bytes of this rank's buffer (`src`).
    pub fn local_len(&self) -> usize {
        self._local.len()
    }

    /// Bytes of the peer's buffer (`dst`).
    pub fn remote_len(&self) -> usize {
        self._remote.len()
    }

    /// Bytes of the local and remote packet buffers, if the channel has them.
    pub fn packet_lens(&self) -> Option<(usize, usize)> {
        self._packets.as_ref().map(|(mine, theirs)| (mine.len(), theirs.len()))
    }

    /// The channel's semaphore.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }
}

//! The PortChannel's device handle: a FIFO to this rank's proxy, the connection and memory
//! indices its commands carry, and a host-to-device semaphore whose inbound token the peer's
//! proxy writes.

use crate::{FifoDeviceHandle, SemaphoreDeviceHandle};

device_structs! {
    /// A PortChannel as kernels see it: puts, signals and flushes become FIFO commands the
    /// proxy executes with a copy engine (or a network transport); waits spin on a token in this
    /// GPU's memory that the peer's proxy stores after the data it covers.
    struct PortChannelDeviceHandle align(8) size(136) {
        /// The FIFO of this rank's proxy.
        fifo: FifoDeviceHandle => "FifoDeviceHandle",
        /// Host-to-device semaphore: the peer's proxy writes `inbound`; `remote_inbound` is 0.
        semaphore: SemaphoreDeviceHandle => "SemaphoreDeviceHandle",
        /// Connection index in this rank's proxy (`< 1024`).
        connection: u32 => "uint32_t",
        /// Default source: this rank's memory index in its proxy's table.
        src_memory: u32 => "uint32_t",
        /// Default destination: the peer's memory index in the peer's table.
        dst_memory: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
    }
}

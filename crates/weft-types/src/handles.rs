//! Device handles: plain values kernels receive as arguments. Pointers are device addresses
//! (`u64`); host objects in `weft-core` keep the memory they point to alive.

device_structs! {
    /// Everything a bounded wait needs to give up cleanly and say who it was waiting for.
    struct WaitContext align(8) size(24) {
        /// Device address of the communicator's `DeviceErrorRecord`.
        error: u64 => "uint64_t",
        /// Spin bound in nanoseconds of `%globaltimer`.
        timeout_ns: u64 => "uint64_t",
        /// This rank.
        rank: i32 => "int32_t",
        /// The peer this handle talks to.
        peer: i32 => "int32_t",
    }

    /// A device-to-device semaphore: monotonic `u64` tokens, never reset.
    struct SemaphoreDeviceHandle align(8) size(48) {
        /// Local token the peer increments (device address of a `uint64_t`).
        inbound: u64 => "uint64_t",
        /// The peer's inbound token, mapped into this GPU (device address of a `uint64_t`).
        remote_inbound: u64 => "uint64_t",
        /// Local count of signals already consumed by waits (device address of a `uint64_t`).
        expected: u64 => "uint64_t",
        /// Timeout and error reporting for waits on this semaphore.
        wait: WaitContext => "WaitContext",
    }

    /// A MemoryChannel: SM loads/stores into a peer's registered buffer plus a semaphore.
    struct MemoryChannelDeviceHandle align(8) size(80) {
        /// Semaphore shared with the peer.
        semaphore: SemaphoreDeviceHandle => "SemaphoreDeviceHandle",
        /// Peer's buffer mapped into this GPU (device address).
        dst: u64 => "uint64_t",
        /// Local buffer (device address).
        src: u64 => "uint64_t",
        /// Local buffer the peer writes LL packets into (device address).
        packet_buffer: u64 => "uint64_t",
        /// The peer's packet buffer, mapped into this GPU: where this side's packets go.
        remote_packet_buffer: u64 => "uint64_t",
    }
}

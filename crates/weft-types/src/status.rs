//! What a kernel reports when a bounded wait expires.

device_enums! {
    /// Kind of failure recorded in a [`DeviceErrorRecord`]; zero means no failure.
    enum DeviceErrorCode {
        /// No error has been recorded.
        None = 0,
        /// A bounded wait expired before its peer made progress.
        Timeout = 1,
        /// A FIFO wait gave up because the proxy serving the FIFO stopped (shut down or failed).
        ProxyStopped = 2,
    }

    /// The device operation that was waiting when a timeout fired.
    enum WaitOp {
        /// `semaphore_wait` / `relaxed_wait` on a device-to-device semaphore.
        SemaphoreWait = 1,
        /// Reading an LL8 packet whose flag never matched.
        Ll8Read = 2,
        /// Reading an LL16 packet whose flags never matched.
        Ll16Read = 3,
        /// Waiting for a peer to finish reading the LL packets of the launch before last.
        LlToken = 4,
        /// `fifo_push` waiting for a free slot in a full FIFO.
        FifoPush = 5,
        /// `fifo_sync` waiting for the proxy to consume a command.
        FifoSync = 6,
        /// The plan executor waiting for the other thread blocks of its rank at a barrier.
        ExecBarrier = 7,
        /// The plan executor waiting for another thread block of its rank to finish an operation.
        ExecStep = 8,
        /// A port ring block waiting for its rank's driver's hand-off or its workers' arrivals.
        RingHandoff = 9,
        /// An expert-parallel barrier between ranks; `peer` is the rank that did not arrive.
        EpBarrier = 10,
        /// A dispatch receiver waiting for a source rank's channel word; `expected` is the channel.
        EpDispatchChannel = 11,
        /// A dispatch receiver waiting for a source rank's tokens; `expected` is the token count.
        EpDispatchTail = 12,
        /// A combine receiver waiting for the rows of the rank that holds a token's experts.
        EpCombineTail = 13,
        /// A low-latency dispatch receiver waiting for a source rank's count of an expert.
        EpLlCount = 14,
        /// A low-latency combine receiver waiting for an expert's rows (`peer`: its rank).
        EpLlFlag = 15,
        /// A GIN `wait_signal`; `peer` is the signal's index (any rank may raise it), `expected` its value.
        GinSignal = 16,
        /// A GIN `wait_counter`; `peer` is the counter's index.
        GinCounter = 17,
        /// A GIN barrier; `peer` is the barrier's signal index, `expected` the arrivals.
        GinBarrier = 18,
        /// A GIN proxy `put_value` waiting for a free staging slot; `peer` is the put's target rank.
        GinStaging = 19,
        /// Reading an LL128 line whose flag never matched; `observed` is the flag word last seen.
        Ll128Read = 20,
        /// A rail forwarder of the normal mode between nodes waiting for a source's rows (`peer`: the source rank, `expected`: its signal's share).
        EpRailRows = 21,
        /// A source of the normal mode between nodes waiting for a forwarder's partial sums (`peer`: the forwarder rank, `expected`: its signal's share).
        EpRailPartials = 22,
        /// A 2PH block waiting for a member of its node's piece or finished shard (`peer`: that rank, `expected`: the round's flag).
        TwoPhaseNode = 23,
        /// A 2PH block waiting for another node's partial (`peer`: that node's rank, `expected`: its signal's count).
        TwoPhaseRail = 24,
        /// The rail hop of a dispatch between nodes waiting for its own pack to reach a chunk's last token (`expected`: tokens packed, `observed`: those seen).
        EpRailPacked = 25,
    }
}

device_structs! {
    /// First failure a kernel observed; written once (the `code` word is claimed with a CAS), read
    /// by the host after the kernel ends. Lives in the communicator's device memory.
    struct DeviceErrorRecord align(8) size(32) {
        /// A [`DeviceErrorCode`] value.
        code: u32 => "uint32_t",
        /// A [`WaitOp`] value.
        op: u32 => "uint32_t",
        /// Rank that was waiting.
        rank: i32 => "int32_t",
        /// Peer rank it was waiting for.
        peer: i32 => "int32_t",
        /// Value (token or flag) the waiter needed.
        expected: u64 => "uint64_t",
        /// Value it last observed.
        observed: u64 => "uint64_t",
    }
}

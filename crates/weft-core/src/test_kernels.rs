//! The parameter lists of the self-test and bench kernels ([`TEST_KERNELS`](crate::device_code::TEST_KERNELS):
//! `device/tests/selftest.cu` and `port.cu`), declared once: a launch takes one of these
//! structs, and `device/include/weft/generated/kernels/tests.cuh`, generated from them, holds
//! the prototypes the kernel definitions are compiled against.

use weft_types::{FifoDeviceHandle, MemoryChannelDeviceHandle, PortChannelDeviceHandle, WaitContext};

weft_gpu::device_kernels! {
    /// Every test kernel's parameter list.
    pub(crate) fn signatures;

    /// Semaphore ping-pong over a MemoryChannel.
    pub struct SelftestPingpong for ["weft_selftest_pingpong"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Round trips.
        iters: u32 => "uint32_t",
        /// Nonzero on the rank that signals first.
        initiator: u32 => "uint32_t",
        /// Nonzero: relaxed signal and wait.
        relaxed: u32 => "uint32_t",
        /// Where the initiator writes the nanoseconds the round trips took.
        elapsed_ns: u64 => "uint64_t*",
    }

    /// A put of `bytes` over a MemoryChannel (SM stores, or the TMA's bulk copies), every block
    /// signalling once with `signal`.
    pub struct SelftestPut for ["weft_selftest_put", "weft_selftest_bulk_put"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Offset in the peer's buffer.
        dst_offset: u64 => "uint64_t",
        /// Offset in the local buffer.
        src_offset: u64 => "uint64_t",
        /// Bytes to put.
        bytes: u64 => "uint64_t",
        /// Nonzero: every block signals the peer once.
        signal: u32 => "uint32_t",
    }

    /// A get of `bytes` over a MemoryChannel.
    pub struct SelftestGet for ["weft_selftest_get"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Offset in the peer's buffer.
        dst_offset: u64 => "uint64_t",
        /// Offset in the local buffer.
        src_offset: u64 => "uint64_t",
        /// Bytes to get.
        bytes: u64 => "uint64_t",
    }

    /// A wait for `count` signals of the peer.
    pub struct SelftestWait for ["weft_selftest_wait"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Signals to wait for.
        count: u32 => "uint32_t",
    }

    /// One LL round trip with the peer (LL8 or LL16 packets).
    pub struct SelftestLlRound for ["weft_selftest_ll8_round", "weft_selftest_ll16_round"] {
        /// The channel to the peer, with packet buffers.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// `uint32_t[LL_BLOCKS]`: the last flag each block used.
        flag_slots: u64 => "uint32_t*",
        /// Payload bytes.
        bytes: u64 => "uint64_t",
        /// Bytes of one parity half of the packet buffers.
        half_bytes: u64 => "uint64_t",
        /// This rank.
        rank: u32 => "uint32_t",
        /// The peer.
        peer: u32 => "uint32_t",
        /// Where the kernel adds the mismatching bytes it counted.
        errors: u64 => "uint32_t*",
    }

    /// Element-wise reduction of two vectors of 16-byte words.
    pub struct SelftestReduce for ["weft_selftest_reduce"] {
        /// First operand.
        a: u64 => "const uint4*",
        /// Second operand.
        b: u64 => "const uint4*",
        /// Result.
        out: u64 => "uint4*",
        /// 16-byte vectors of each buffer.
        vectors: u64 => "uint64_t",
        /// Element type: 0 f32, 1 f16, 2 bf16.
        dtype: u32 => "uint32_t",
        /// Operator: 0 sum, 1 min, 2 max.
        op: u32 => "uint32_t",
    }

    /// Put-with-signal chunks over one PortChannel per block, then waits and a flush.
    pub struct PortExchange for ["weft_port_exchange"] {
        /// `PortChannelDeviceHandle[grid]`: block b's channel.
        chs: u64 => "const weft::PortChannelDeviceHandle*",
        /// Bytes of a chunk.
        chunk: u32 => "uint32_t",
        /// Chunks in all.
        chunks: u32 => "uint32_t",
        /// Offset in the peer's memory of chunk 0.
        dst_base: u32 => "uint32_t",
        /// `uint32_t[grid]`: 1 where block b succeeded.
        status: u64 => "uint32_t*",
    }

    /// One wait on a PortChannel.
    pub struct PortWaitOnce for ["weft_port_wait_once"] {
        /// The channel.
        ch: PortChannelDeviceHandle => "weft::PortChannelDeviceHandle",
        /// `status[0]` = 1 on success.
        status: u64 => "uint32_t*",
    }

    /// One direction of `weft bench p2p --channel port`.
    pub struct PortPutBandwidth for ["weft_port_put_bw"] {
        /// The channel.
        ch: PortChannelDeviceHandle => "weft::PortChannelDeviceHandle",
        /// Bytes of each put.
        bytes: u32 => "uint32_t",
        /// Puts (sender) or signals to wait for (receiver).
        count: u32 => "uint32_t",
        /// Nonzero on the sending rank.
        sender: u32 => "uint32_t",
        /// `status[0]` = 1 on success.
        status: u64 => "uint32_t*",
    }

    /// FIFO push rate: `pushers` threads push `pushes` commands each.
    /// Pusher p pushes into FIFO `p % nfifos`; then each block waits until the proxy consumed
    /// its commands.
    pub struct FifoPushRate for ["weft_fifo_push_rate"] {
        /// `FifoDeviceHandle[nfifos]`.
        fifos: u64 => "const weft::FifoDeviceHandle*",
        /// FIFOs.
        nfifos: u32 => "uint32_t",
        /// The `FifoOp` pushed.
        op: u32 => "uint32_t",
        /// Pushing threads.
        pushers: u32 => "uint32_t",
        /// Pushing lanes of each warp.
        lanes: u32 => "uint32_t",
        /// Pushes per thread.
        pushes: u32 => "uint32_t",
        /// Sequence number of the first push.
        first_seq: u32 => "uint32_t",
        /// `out[0]`: failures.
        out: u64 => "unsigned long long*",
    }

    /// Latency of a device read of host-pinned memory (the FIFO's tail).
    pub struct HostReadLatency for ["weft_host_read_latency"] {
        /// The FIFO whose tail is read.
        fifo: FifoDeviceHandle => "weft::FifoDeviceHandle",
        /// Reads.
        rounds: u32 => "uint32_t",
        /// `out[0]`: total nanoseconds, `out[1]`: the sum read.
        out: u64 => "unsigned long long*",
    }

    /// Round-trip latency of a FIFO push and its completion.
    pub struct FifoLatency for ["weft_fifo_latency"] {
        /// The FIFO.
        fifo: FifoDeviceHandle => "weft::FifoDeviceHandle",
        /// The `FifoOp` pushed.
        op: u32 => "uint32_t",
        /// Round trips.
        rounds: u32 => "uint32_t",
        /// `out[0]`: total nanoseconds, `out[1]`: failures.
        out: u64 => "unsigned long long*",
    }

    /// A bounded wait for a host-written token to reach `value`.
    pub struct WaitToken for ["weft_wait_token"] {
        /// The token, in memory the device reads.
        token: u64 => "const uint64_t*",
        /// The value waited for.
        value: u64 => "uint64_t",
        /// The bound of the wait and where a timeout is recorded.
        wait: WaitContext => "weft::WaitContext",
        /// `status[0]` = 1 on success.
        status: u64 => "uint32_t*",
    }
}

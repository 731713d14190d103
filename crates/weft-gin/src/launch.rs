//! The parameter lists of the GIN kernels (the examples and the benchmark's probes), declared once: a launch takes one of these
//! structs (built by [`crate::examples`]), and `device/include/weft/generated/kernels/gin.cuh`, generated from them, holds the
//! prototypes the kernel definitions are compiled against.

use weft_types::DevCommHandle;

weft_gpu::device_kernels! {
    /// Every GIN kernel's parameter list.
    pub(crate) fn signatures;

    /// AllToAll with put + signal (`device/kernels/gin/alltoall.cu`).
    pub struct AllToAll for ["weft_gin_alltoall"] {
        /// The device communicator.
        h: DevCommHandle => "weft::DevCommHandle",
        /// Window holding `world` chunks to send.
        send: u32 => "uint32_t",
        /// Window receiving `world` chunks.
        recv: u32 => "uint32_t",
        /// Bytes per chunk.
        chunk: u64 => "uint64_t",
        /// Signal raised by every put.
        signal: u32 => "uint32_t",
        /// World barrier each call starts with (`device/kernels/gin/call.cuh`).
        barrier: u32 => "uint32_t",
    }

    /// Ring AllGather with put + signal (`device/kernels/gin/ring_allgather.cu`).
    pub struct RingAllGather for ["weft_gin_ring_allgather"] {
        /// The device communicator.
        h: DevCommHandle => "weft::DevCommHandle",
        /// Window holding `world` chunks, this rank's own at `rank * chunk`.
        data: u32 => "uint32_t",
        /// Bytes per chunk.
        chunk: u64 => "uint64_t",
        /// Signal raised by every put.
        signal: u32 => "uint32_t",
        /// World barrier each call starts with (`device/kernels/gin/call.cuh`).
        barrier: u32 => "uint32_t",
    }

    /// Halo exchange on a ring of ranks (`device/kernels/gin/halo.cu`).
    pub struct Halo for ["weft_gin_halo"] {
        /// The device communicator.
        h: DevCommHandle => "weft::DevCommHandle",
        /// Window `[left halo | interior | right halo]`.
        field: u32 => "uint32_t",
        /// Bytes of each halo.
        halo: u64 => "uint64_t",
        /// Bytes of the interior (at least `halo`).
        interior: u64 => "uint64_t",
        /// Signal raised by every put.
        signal: u32 => "uint32_t",
        /// World barrier each call starts with (`device/kernels/gin/call.cuh`).
        barrier: u32 => "uint32_t",
    }

    /// Put + signal ping-pong between ranks 0 and 1 (`device/kernels/gin/ping_pong.cu`).
    pub struct PingPong for ["weft_gin_ping_pong"] {
        /// The device communicator.
        h: DevCommHandle => "weft::DevCommHandle",
        /// Window of `2 * bytes`: sent from offset 0, received at `bytes`.
        data: u32 => "uint32_t",
        /// Bytes per put.
        bytes: u64 => "uint64_t",
        /// Round trips per call.
        rounds: u32 => "uint32_t",
        /// Signal raised by every put.
        signal: u32 => "uint32_t",
        /// World barrier each call starts with (`device/kernels/gin/call.cuh`).
        barrier: u32 => "uint32_t",
    }

    /// A stream of puts + signal from rank 0 to rank 1 (`device/kernels/gin/put_stream.cu`).
    pub struct PutStream for ["weft_gin_put_stream"] {
        /// The device communicator.
        h: DevCommHandle => "weft::DevCommHandle",
        /// Window of `bytes`: sent from and received at offset 0.
        data: u32 => "uint32_t",
        /// Bytes per put.
        bytes: u64 => "uint64_t",
        /// Puts per call.
        messages: u32 => "uint32_t",
        /// Signal raised by every put.
        signal: u32 => "uint32_t",
        /// World barrier each call starts with (`device/kernels/gin/call.cuh`).
        barrier: u32 => "uint32_t",
    }
}

//! What collective kernels receive by value: the communicator's collective state, for grouped
//! send/receive the plan of one launch and the state of its LL pairs, and for zero-copy calls
//! the peers' user buffers.

/// Most ranks a collective kernel handles (per-rank tables live in registers and in
/// [`P2pPlan`]'s fixed arrays).
pub const MAX_RANKS: usize = 8;

device_structs! {
    /// Collective state of one rank: device addresses of its tables and buffers and their
    /// geometry, and the call's operator argument. Every collective kernel takes it as its
    /// first argument, by value: each launch passes its own copy (a captured launch keeps it).
    /// `scalar` holds PreMulSum's scalar, zero-extended, or with `scalar_in_device` the device
    /// address of it, read when the kernel runs (a graph replay sees the current value).
    struct CollContext align(8) size(112) {
        /// `MemoryChannelDeviceHandle[ranks]` over the scratch and packet buffers (entry `rank` unused).
        channels: u64 => "uint64_t",
        /// `SemaphoreDeviceHandle[ranks * hb_blocks]`, entry `peer * hb_blocks + block`.
        semaphores: u64 => "uint64_t",
        /// This rank's registered scratch, `2 * chunk_bytes` long.
        scratch: u64 => "uint64_t",
        /// Half of the scratch length (the HB kernels' round size).
        chunk_bytes: u64 => "uint64_t",
        /// This rank's registered LL packet buffer.
        packets: u64 => "uint64_t",
        /// Bytes of one parity half of the packet buffer.
        packet_half_bytes: u64 => "uint64_t",
        /// Bytes of one packet region (slot) inside a half.
        packet_slot_bytes: u64 => "uint64_t",
        /// Offset of the LL tokens (`uint32_t[ll_blocks + ll128_blocks][ranks]`) in the packet buffer.
        token_offset: u64 => "uint64_t",
        /// `uint32_t[ll_blocks + ll128_blocks]`: the last LL flag each lane (LL16 blocks, then LL128 blocks) used.
        flags: u64 => "uint64_t",
        /// This rank.
        rank: u32 => "uint32_t",
        /// Ranks of the communicator.
        ranks: u32 => "uint32_t",
        /// Blocks of every HB launch (the semaphore table's stride).
        hb_blocks: u32 => "uint32_t",
        /// Blocks of a send/receive launch per (peer, direction).
        p2p_blocks: u32 => "uint32_t",
        /// PreMulSum's scalar (one element of the call's type): its bits, or its device address.
        scalar: u64 => "uint64_t",
        /// Nonzero: `scalar` is a device address.
        scalar_in_device: u32 => "uint32_t",
        /// Offset of the LL128 region in the packet buffer (128-aligned; see weft-coll's PacketLayout).
        ll128_offset: u32 => "uint32_t",
        /// The LL lane of an LL128 launch's block 0 (block b: flag and token row `ll128_lane + b`; LL16 blocks use those below).
        ll128_lane: u32 => "uint32_t",
        /// A `weft_p2p` direction of at least this many MiB runs on `2 * p2p_blocks` blocks (0: never).
        p2p_wide_mib: u32 => "uint32_t",
    }

    /// One grouped send/receive launch: per peer, what to send to it and where to receive from
    /// it (zero bytes: nothing). Entry `rank` is a local copy from `send_ptr` to `recv_ptr`.
    struct P2pPlan align(8) size(256) {
        /// Source of the bytes sent to each peer.
        send_ptr: [u64; 8] => "uint64_t[8]",
        /// Bytes sent to each peer.
        send_bytes: [u64; 8] => "uint64_t[8]",
        /// Destination of the bytes received from each peer.
        recv_ptr: [u64; 8] => "uint64_t[8]",
        /// Bytes received from each peer.
        recv_bytes: [u64; 8] => "uint64_t[8]",
    }

    /// The state of the lanes of send/receive over LL packets (`weft_p2p_ll`).
    /// One lane per (direction, peer, part), each with its own flag and token, so a pair's
    /// transfers advance only the lanes of that pair. In every rank's packet buffer, past the
    /// collective LL region: two parity halves of one slot per sender (slot s of rank d's half:
    /// what s sends to d), then the tokens, `uint32_t[parts][ranks]`, entry `[j][d]` of rank
    /// s's buffer written by receiver d when it has drained part j of what s sent it.
    struct LlPairs align(8) size(48) {
        /// `uint32_t[2][ranks][parts]`: last flag of part j sending to (`[0][p][j]`) or receiving from (`[1][p][j]`) p.
        flags: u64 => "uint64_t",
        /// Offset of the pair region in the packet buffer (16-byte aligned).
        offset: u64 => "uint64_t",
        /// Bytes of one sender's slot (LL16 packets: twice the payload it holds).
        slot_bytes: u64 => "uint64_t",
        /// Bytes of one parity half: `ranks` slots.
        half_bytes: u64 => "uint64_t",
        /// Offset of the tokens in the packet buffer.
        token_offset: u64 => "uint64_t",
        /// Blocks of a launch per (peer, direction): the parts a message is dealt into.
        parts: u32 => "uint32_t",
        /// Zero (keeps the struct's size a multiple of its alignment).
        reserved: u32 => "uint32_t",
    }

    /// The user buffers of one zero-copy call as this rank's GPU addresses them: entry r is
    /// rank r's buffer (entry `rank` this rank's own), mapped from the peers' registrations.
    /// Passed by value, so a captured launch carries its own copy: graph replays see the same
    /// addresses and a call writes no table. All zero: the call stages through scratch.
    struct PeerBuffers align(8) size(64) {
        /// Rank r's buffer, 16-byte aligned, or 0 (stage through scratch).
        ptr: [u64; 8] => "uint64_t[8]",
    }
}

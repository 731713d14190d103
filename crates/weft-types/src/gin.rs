//! The device communicator of GIN (device-initiated communication, `weft-gin`): what a kernel
//! needs to put, signal, count and synchronise by itself, over NVLink (LSA) or through the
//! proxy. Built by `weft_gin::DevComm`, passed to kernels by value.

use crate::WaitContext;

/// The most ranks a GIN device communicator covers (the per-thread ordering state of
/// `weft::Gin` keeps one word per rank).
pub const GIN_MAX_RANKS: usize = 32;

/// The most signal slots (user signals plus one per barrier): each is a proxy connection per
/// network peer, and a `weft::Gin` tracks them in one 64-bit mask per peer.
pub const GIN_MAX_SIGNALS: usize = 63;

/// Slots of the staging area `put_value` uses on the proxy backend.
pub const GIN_STAGING_SLOTS: usize = 256;

/// Bytes of NCCL 2.28.9's `ncclDevComm`, which weft's `libnccl.so.2` fills in
/// `ncclDevCommCreate` (weft-nccl checks the value against NCCL's header).
pub const NCCL_DEV_COMM_BYTES: usize = 200;

/// Where weft's part of an `ncclDevComm` lies: `uint32_t magic`
/// ([`NCCL_DEV_COMM_WEFT_MAGIC`]), `uint32_t id`, `uint64_t` device address of the
/// [`DevCommHandle`], in the 16 bytes of NCCL's `ginSignalBase` .. `ginCounterCount`.
pub const NCCL_DEV_COMM_WEFT_OFFSET: usize = 176;

/// The magic of an `ncclDevComm` made by weft (`"wDC1"` in memory order).
pub const NCCL_DEV_COMM_WEFT_MAGIC: u32 = u32::from_le_bytes(*b"wDC1");

device_structs! {
    /// A GIN device communicator (`weft_gin::DevComm`). This rank's heap holds, at offset 0,
    /// `uint64_t signals[signal_slots]` (user signals, then one per world barrier, then one per
    /// LSA barrier), at `staging_offset` `uint64_t[GIN_STAGING_SLOTS]` of put_value staging,
    /// then the windows. `state` is local device memory: `uint64_t counters[counters]`,
    /// `uint64_t signal_base[signal_slots]`, `uint64_t barrier_epoch[world_barriers +
    /// lsa_barriers]`, `uint32_t staging_busy[GIN_STAGING_SLOTS]`, all zeroed at creation.
    struct DevCommHandle align(8) size(144) {
        /// This rank's heap (device address).
        heap: u64 => "uint64_t",
        /// `uint64_t[world]`: rank r's heap mapped here, 0 for a proxy peer (entry `rank`: this heap).
        peer_heaps: u64 => "uint64_t",
        /// `uint64_t[2 * window_count]`: window w's offset in the heap and its bytes (same on every rank).
        windows: u64 => "uint64_t",
        /// `PortChannelDeviceHandle[world * (signal_slots + 1)]`: entry `peer * (signal_slots + 1) + c` is connection c to a proxy peer (c < signal_slots carries signal c, the last puts without a signal); zero for LSA peers.
        ports: u64 => "uint64_t",
        /// The local state (see above).
        state: u64 => "uint64_t",
        /// `uint32_t[lsa_size]`: the world rank of each member of this rank's LSA team.
        lsa_ranks: u64 => "uint64_t",
        /// `uint32_t[rail_size]`: the world rank of each member of this rank's rail team.
        rail_ranks: u64 => "uint64_t",
        /// Bit r set: rank r is reached through the proxy.
        proxy_mask: u64 => "uint64_t",
        /// Error record and bound of every wait.
        wait: WaitContext => "WaitContext",
        /// This rank.
        rank: u32 => "uint32_t",
        /// Ranks of the communicator.
        world: u32 => "uint32_t",
        /// This rank's index in its LSA team.
        lsa_rank: u32 => "uint32_t",
        /// Ranks of this rank's LSA team (its node).
        lsa_size: u32 => "uint32_t",
        /// This rank's index in its rail team.
        rail_rank: u32 => "uint32_t",
        /// Ranks of this rank's rail team (the same local rank on every node).
        rail_size: u32 => "uint32_t",
        /// User signals (indices `0..signals`).
        signals: u32 => "uint32_t",
        /// Signal slots: user signals plus one per barrier.
        signal_slots: u32 => "uint32_t",
        /// Counters.
        counters: u32 => "uint32_t",
        /// World barriers.
        world_barriers: u32 => "uint32_t",
        /// LSA barriers.
        lsa_barriers: u32 => "uint32_t",
        /// Windows.
        window_count: u32 => "uint32_t",
        /// Offset of the put_value staging area in the heap.
        staging_offset: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
    }
}

/// The constants the device API needs.
pub(crate) fn constants() -> Vec<(&'static str, u64, &'static str)> {
    vec![
        ("GIN_MAX_RANKS", GIN_MAX_RANKS as u64, "The most ranks of a GIN device communicator."),
        ("GIN_MAX_SIGNALS", GIN_MAX_SIGNALS as u64, "The most GIN signal slots (user signals plus barriers)."),
        ("GIN_STAGING_SLOTS", GIN_STAGING_SLOTS as u64, "Slots of GIN's put_value staging area."),
        ("NCCL_DEV_COMM_BYTES", NCCL_DEV_COMM_BYTES as u64, "Bytes of NCCL 2.28.9's ncclDevComm."),
        (
            "NCCL_DEV_COMM_WEFT_OFFSET",
            NCCL_DEV_COMM_WEFT_OFFSET as u64,
            "Offset of weft's part of an ncclDevComm: u32 magic, u32 id, u64 DevCommHandle address.",
        ),
        (
            "NCCL_DEV_COMM_WEFT_MAGIC",
            NCCL_DEV_COMM_WEFT_MAGIC as u64,
            "Magic of an ncclDevComm made by weft's libnccl.so.2.",
        ),
    ]
}

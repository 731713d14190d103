//! LL packets: data and flag written by one vector store, so a reader that sees the flag sees
//! the data. Flags must be non-zero and differ from what sits in the slot.

device_structs! {
    /// LL8: 4 bytes of payload and a 4-byte flag, written with one 8-byte store.
    struct Ll8Packet align(8) size(8) {
        /// Payload.
        data: u32 => "uint32_t",
        /// Flag of the launch that wrote it.
        flag: u32 => "uint32_t",
    }

    /// LL16: 8 bytes of payload in two halves, each with its own flag, written with one 16-byte store.
    struct Ll16Packet align(16) size(16) {
        /// First payload word.
        data1: u32 => "uint32_t",
        /// Flag guarding `data1`.
        flag1: u32 => "uint32_t",
        /// Second payload word.
        data2: u32 => "uint32_t",
        /// Flag guarding `data2`.
        flag2: u32 => "uint32_t",
    }
}

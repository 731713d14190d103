//! The GPU→CPU FIFO: 16-byte commands a kernel pushes into host-pinned memory and a proxy thread
//! executes, and the device handle of one FIFO.
//!
//! A [`FifoCommand`] is two little-endian `u64` words, and each word carries the lap-parity
//! valid bit (`fst` bit 31, `snd` bit 63): the device publishes a command with a release fence
//! and then one 16-byte store of both words, which PTX does not order between themselves, so a
//! reader takes the command only once both words show the bit of the current lap. Slots are never cleared: the bit a writer stores on lap
//! `L` (position `pos`, lap `pos / depth`) is `(L & 1) ^ 1`, so zeroed memory reads as empty on
//! lap 0 and a stale word of the previous lap never looks valid.
//!
//! | word | bits | field | meaning |
//! | --- | --- | --- | --- |
//! | `fst` | 0–30 | `size` | bytes to put (`< 2 GiB`; the device API splits larger puts); 0 for commands without a put |
//! | `fst` | 31 | valid | lap-parity bit, see above |
//! | `fst` | 32–63 | `src_offset` | byte offset into the source memory (`< 4 GiB`) |
//! | `snd` | 0–31 | `dst_offset` | byte offset into the destination memory (`< 4 GiB`) |
//! | `snd` | 32–35 | `op` | a [`FifoOp`] (1–7) or an op number 8–15 owned by another layer's handler; 0 is never valid |
//! | `snd` | 36–45 | `connection` | the proxy's connection index (`< 1024`) |
//! | `snd` | 46–53 | `src_memory` | index of the source memory in the proxy's local memory table (`< 256`) |
//! | `snd` | 54–61 | `dst_memory` | index of the destination memory in the peer's memory table (`< 256`) |
//! | `snd` | 62 | reserved | zero |
//! | `snd` | 63 | valid | lap-parity bit, see above |
//!
//! For ops 8–15 every bit except `op` and the two valid bits is an opaque payload the op's
//! handler decodes.

use crate::WaitContext;

device_enums! {
    /// What a FIFO command asks the proxy to do: bit 0 put, bit 1 signal, bit 2 flush, executed
    /// in that order. Op numbers 8–15 are free for the handlers of other layers (expert-parallel
    /// network path, GIN proxy backend).
    enum FifoOp {
        /// Write `size` bytes from local memory to the peer's memory.
        Put = 1,
        /// Increment the peer's inbound token of this connection once all earlier puts are applied there.
        Signal = 2,
        /// Put, then signal.
        PutSignal = 3,
        /// Complete (pop) only once every earlier operation of the connection is applied at the peer.
        Flush = 4,
        /// Put, then flush.
        PutFlush = 5,
        /// Signal, then flush.
        SignalFlush = 6,
        /// Put, signal, then flush.
        PutSignalFlush = 7,
    }

    /// Value of a FIFO's stop word (host-pinned, read by the device's bounded waits).
    enum FifoStopCode {
        /// The proxy serves the FIFO.
        Running = 0,
        /// The proxy shut down: waits give up and report `DeviceErrorCode::ProxyStopped`.
        Shutdown = 1,
        /// The proxy failed (a transport error; the host holds the details).
        Failed = 2,
    }
}

device_structs! {
    /// One FIFO command: two words, each with the lap's valid bit (see the module docs for every bit).
    struct FifoCommand align(16) size(16) {
        /// Bits 0–30 size in bytes, 31 valid, bits 32–63 source offset.
        fst: u64 => "uint64_t",
        /// Bits 0–31 dst offset, 32–35 op, 36–45 connection, 46–53 src memory, 54–61 dst memory, 63 valid.
        snd: u64 => "uint64_t",
    }

    /// A FIFO as kernels see it. One thread pushes at a time per call; any number of threads may
    /// push concurrently (each takes its own slot from `head`).
    struct FifoDeviceHandle align(8) size(72) {
        /// Device address of `FifoCommand[depth]` in host-pinned memory mapped into the device.
        ring: u64 => "uint64_t",
        /// Device address of the `uint64_t` head (device memory): next position to hand out.
        head: u64 => "uint64_t",
        /// Device address of the `uint64_t` tail (host-pinned, mapped): positions below it are consumed.
        tail: u64 => "uint64_t",
        /// Device address of a `uint64_t` (device memory) caching the last tail seen (saves PCIe reads); bit `FIFO_TAIL_CACHE_STOPPED`: a pusher saw the stop word.
        tail_cache: u64 => "uint64_t",
        /// Device address of the `uint64_t` stop word (host-pinned, mapped): a `FifoStopCode`.
        stop: u64 => "uint64_t",
        /// Slots in the ring; a power of two between 2 and `FIFO_MAX_DEPTH`.
        depth: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
        /// Timeout and error record of the FIFO's bounded waits (`peer` is -1).
        wait: WaitContext => "WaitContext",
    }
}

/// Bit position of `src_offset` in `fst`.
pub const FIFO_FST_SRC_OFFSET_SHIFT: u32 = 32;
/// Width of `size` (bits 0–30 of `fst`).
pub const FIFO_SIZE_BITS: u32 = 31;
/// Bit position of the lap-parity valid bit in `fst`.
pub const FIFO_FST_VALID_SHIFT: u32 = 31;
/// Bit position of `op` in `snd`.
pub const FIFO_SND_OP_SHIFT: u32 = 32;
/// Width of `op`.
pub const FIFO_OP_BITS: u32 = 4;
/// Bit position of `connection` in `snd`.
pub const FIFO_SND_CONNECTION_SHIFT: u32 = 36;
/// Width of `connection`.
pub const FIFO_CONNECTION_BITS: u32 = 10;
/// Bit position of `src_memory` in `snd`.
pub const FIFO_SND_SRC_MEMORY_SHIFT: u32 = 46;
/// Bit position of `dst_memory` in `snd`.
pub const FIFO_SND_DST_MEMORY_SHIFT: u32 = 54;
/// Width of `src_memory` and `dst_memory`.
pub const FIFO_MEMORY_BITS: u32 = 8;
/// Bit position of the lap-parity valid bit in `snd`.
pub const FIFO_SND_VALID_SHIFT: u32 = 63;
/// Largest FIFO depth.
pub const FIFO_MAX_DEPTH: u32 = 1 << 20;
/// Bit of a FIFO's tail cache set by a pusher that saw the stop word: every later push and
/// every waiting pusher gives up without reading host memory (positions stay below it).
pub const FIFO_TAIL_CACHE_STOPPED: u64 = 1 << 63;

/// Constants of this module carried into the generated header: `(name, value, doc)`.
pub(crate) fn constants() -> Vec<(&'static str, u64, &'static str)> {
    vec![
        ("FIFO_FST_SRC_OFFSET_SHIFT", FIFO_FST_SRC_OFFSET_SHIFT.into(), "bit position of src_offset in fst"),
        ("FIFO_SIZE_BITS", FIFO_SIZE_BITS.into(), "width of size in fst"),
        ("FIFO_FST_VALID_SHIFT", FIFO_FST_VALID_SHIFT.into(), "bit position of the lap-parity valid bit in fst"),
        ("FIFO_SND_OP_SHIFT", FIFO_SND_OP_SHIFT.into(), "bit position of op in snd"),
        ("FIFO_OP_BITS", FIFO_OP_BITS.into(), "width of op"),
        ("FIFO_SND_CONNECTION_SHIFT", FIFO_SND_CONNECTION_SHIFT.into(), "bit position of connection in snd"),
        ("FIFO_CONNECTION_BITS", FIFO_CONNECTION_BITS.into(), "width of connection"),
        ("FIFO_SND_SRC_MEMORY_SHIFT", FIFO_SND_SRC_MEMORY_SHIFT.into(), "bit position of src_memory in snd"),
        ("FIFO_SND_DST_MEMORY_SHIFT", FIFO_SND_DST_MEMORY_SHIFT.into(), "bit position of dst_memory in snd"),
        ("FIFO_MEMORY_BITS", FIFO_MEMORY_BITS.into(), "width of src_memory and dst_memory"),
        ("FIFO_SND_VALID_SHIFT", FIFO_SND_VALID_SHIFT.into(), "bit position of the lap-parity valid bit in snd"),
        ("FIFO_MAX_DEPTH", FIFO_MAX_DEPTH.into(), "largest FIFO depth"),
        ("FIFO_TAIL_CACHE_STOPPED", FIFO_TAIL_CACHE_STOPPED, "tail-cache bit: a pusher saw the stop word"),
    ]
}

/// The decoded fields of a [`FifoCommand`] (everything but the valid bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FifoCommandFields {
    /// Raw op number, 1–15 (1–7 are [`FifoOp`]s).
    pub op: u8,
    /// Connection index, `< 1024`.
    pub connection: u16,
    /// Source memory index.
    pub src_memory: u8,
    /// Destination memory index.
    pub dst_memory: u8,
    /// Source byte offset.
    pub src_offset: u32,
    /// Destination byte offset.
    pub dst_offset: u32,
    /// Bytes to put.
    pub size: u32,
}

/// A field that does not fit its bits in a [`FifoCommand`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldOutOfRange {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// The largest value it may take.
    pub max: u64,
}

impl std::fmt::Display for FieldOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FIFO command field {} = {} exceeds its maximum {}", self.field, self.value, self.max)
    }
}

impl std::error::Error for FieldOutOfRange {}

const fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

impl FifoCommand {
    /// Encodes `fields` with the valid bits clear; fails when `op` is 0 or wider than its bits,
    /// `connection` is 1024 or more, or `size` is 2 GiB or more.
    pub fn encode(fields: FifoCommandFields) -> Result<Self, FieldOutOfRange> {
        let op = u64::from(fields.op);
        if op == 0 || op > mask(FIFO_OP_BITS) {
            return Err(FieldOutOfRange { field: "op", value: op, max: mask(FIFO_OP_BITS) });
        }
        let connection = u64::from(fields.connection);
        if connection > mask(FIFO_CONNECTION_BITS) {
            return Err(FieldOutOfRange { field: "connection", value: connection, max: mask(FIFO_CONNECTION_BITS) });
        }
        let size = u64::from(fields.size);
        if size > mask(FIFO_SIZE_BITS) {
            return Err(FieldOutOfRange { field: "size", value: size, max: mask(FIFO_SIZE_BITS) });
        }
        Ok(Self {
            fst: size | (u64::from(fields.src_offset) << FIFO_FST_SRC_OFFSET_SHIFT),
            snd: u64::from(fields.dst_offset)
                | (op << FIFO_SND_OP_SHIFT)
                | (connection << FIFO_SND_CONNECTION_SHIFT)
                | (u64::from(fields.src_memory) << FIFO_SND_SRC_MEMORY_SHIFT)
                | (u64::from(fields.dst_memory) << FIFO_SND_DST_MEMORY_SHIFT),
        })
    }

    /// The fields (the valid bits are ignored).
    pub fn fields(&self) -> FifoCommandFields {
        // Each cast below takes bits masked to the target width, so none truncates.
        FifoCommandFields {
            op: ((self.snd >> FIFO_SND_OP_SHIFT) & mask(FIFO_OP_BITS)) as u8,
            connection: ((self.snd >> FIFO_SND_CONNECTION_SHIFT) & mask(FIFO_CONNECTION_BITS)) as u16,
            src_memory: ((self.snd >> FIFO_SND_SRC_MEMORY_SHIFT) & mask(FIFO_MEMORY_BITS)) as u8,
            dst_memory: ((self.snd >> FIFO_SND_DST_MEMORY_SHIFT) & mask(FIFO_MEMORY_BITS)) as u8,
            src_offset: (self.fst >> FIFO_FST_SRC_OFFSET_SHIFT) as u32,
            dst_offset: (self.snd & mask(32)) as u32,
            size: (self.fst & mask(FIFO_SIZE_BITS)) as u32,
        }
    }

    /// The raw op number (1–15; 0 only in a slot never written).
    pub fn op(&self) -> u8 {
        ((self.snd >> FIFO_SND_OP_SHIFT) & mask(FIFO_OP_BITS)) as u8
    }

    /// The valid bits of `fst` and `snd`.
    pub fn valid_bits(&self) -> [bool; 2] {
        [(self.fst >> FIFO_FST_VALID_SHIFT) & 1 != 0, self.snd >> FIFO_SND_VALID_SHIFT != 0]
    }

    /// The command with both valid bits cleared.
    pub fn without_valid_bits(self) -> Self {
        Self { fst: self.fst & !(1u64 << FIFO_FST_VALID_SHIFT), snd: self.snd & !(1u64 << FIFO_SND_VALID_SHIFT) }
    }

    /// The command as a writer at `position` stores it in a ring of `2^log2_depth` slots: both
    /// valid bits set to the lap's parity.
    pub fn for_position(self, position: u64, log2_depth: u32) -> Self {
        let parity = fifo_parity(position, log2_depth);
        let clear = self.without_valid_bits();
        Self { fst: clear.fst | (parity << FIFO_FST_VALID_SHIFT), snd: clear.snd | (parity << FIFO_SND_VALID_SHIFT) }
    }

    /// Whether both words carry the valid bit of the lap of `position` (the reader's test).
    pub fn is_current(&self, position: u64, log2_depth: u32) -> bool {
        let parity = fifo_parity(position, log2_depth) != 0;
        self.valid_bits() == [parity, parity]
    }
}

/// The valid bit of lap `position >> log2_depth`: 1 on even laps, 0 on odd ones.
pub fn fifo_parity(position: u64, log2_depth: u32) -> u64 {
    ((position >> log2_depth) & 1) ^ 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_extremes() {
        for fields in [
            FifoCommandFields { op: 1, ..Default::default() },
            FifoCommandFields {
                op: 15,
                connection: 1023,
                src_memory: 255,
                dst_memory: 255,
                src_offset: u32::MAX,
                dst_offset: u32::MAX,
                size: (1 << 31) - 1,
            },
            FifoCommandFields {
                op: 7,
                connection: 5,
                src_memory: 1,
                dst_memory: 2,
                src_offset: 3,
                dst_offset: 4,
                size: 9,
            },
        ] {
            let cmd = FifoCommand::encode(fields).unwrap();
            assert_eq!(cmd.valid_bits(), [false, false]);
            assert_eq!(cmd.snd >> 62, 0, "reserved and valid bits stay clear");
            assert_eq!(cmd.fields(), fields);
            let on_lap_0 = cmd.for_position(3, 2);
            assert_eq!(on_lap_0.valid_bits(), [true, true]);
            assert!(on_lap_0.is_current(3, 2) && !on_lap_0.is_current(4, 2));
            assert_eq!(on_lap_0.fields(), fields);
            assert_eq!(on_lap_0.without_valid_bits(), cmd);
            let on_lap_1 = cmd.for_position(4, 2);
            assert_eq!(on_lap_1.valid_bits(), [false, false]);
            assert!(on_lap_1.is_current(5, 2));
            // One word of the new lap and one of the old is not a command yet, in either order.
            assert!(!FifoCommand { fst: on_lap_0.fst, snd: on_lap_1.snd }.is_current(3, 2));
            assert!(!FifoCommand { fst: on_lap_1.fst, snd: on_lap_0.snd }.is_current(3, 2));
        }
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        assert_eq!(FifoCommand::encode(FifoCommandFields::default()).unwrap_err().field, "op");
        assert_eq!(FifoCommand::encode(FifoCommandFields { op: 16, ..Default::default() }).unwrap_err().field, "op");
        let err = FifoCommand::encode(FifoCommandFields { op: 1, connection: 1024, ..Default::default() }).unwrap_err();
        assert_eq!(err.field, "connection");
        assert!(err.to_string().contains("1023"));
        let err = FifoCommand::encode(FifoCommandFields { op: 1, size: 1 << 31, ..Default::default() }).unwrap_err();
        assert_eq!((err.field, err.max), ("size", (1 << 31) - 1));
    }

    #[test]
    fn ops_are_the_flag_combinations() {
        for raw in 1..=7u32 {
            let op = FifoOp::from_raw(raw).unwrap();
            assert_eq!(op as u32, raw);
        }
        assert_eq!(FifoOp::from_raw(8), None);
        assert_eq!(FifoOp::PutSignalFlush as u32, FifoOp::Put as u32 | FifoOp::Signal as u32 | FifoOp::Flush as u32);
    }
}

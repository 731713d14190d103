//! The expert-parallel network path's command: a [`TransferCmd`] is a [`FifoCommand`] of op
//! [`TRANSFER_FIFO_OP`], pushed into the same GPU→CPU FIFO and executed by the same proxy service
//! as every other command (a handler registered for that op), so it shares the FIFO's protocol:
//! 16 bytes, one store, the lap-parity valid bit in bit 31 of `len` and of `control`.
//!
//! | word | bits | Write | CounterAdd / CounterSet | Quiet |
//! | --- | --- | --- | --- | --- |
//! | `len` | 0–30 | bytes (`< 2 GiB`) | counter index (`< 2^TRANSFER_COUNTER_BITS`) | 0 |
//! | `len` | 31 | valid | valid | valid |
//! | `src` | 0–31 | source offset in this rank's buffer | value: add `i16` (two's complement, sign-extended), set `u16` | 0 |
//! | `dst` | 0–31 | destination offset in the peer's buffer | 0 | 0 |
//! | `control` | 0–3 | [`TRANSFER_FIFO_OP`] | same | same |
//! | `control` | 4–13 | connection: the proxy's connection to one (peer, channel) | same | same |
//! | `control` | 14–15 | [`TransferKind`] | same | same |
//! | `control` | 16–30 | reserved, zero | same | same |
//! | `control` | 31 | valid | valid | valid |
//!
//! `len`/`src` are the FIFO command's `fst` word and `dst`/`control` its `snd` word (little
//! endian), so the connection sits where every FIFO command keeps it. The buffers are the ones
//! registered with the connection. A write and the counter update announcing it are two commands
//! on one connection: the device pushes both through one FIFO, the proxy stamps counter updates
//! with the connection's next sequence number, and the receiving proxy applies them in that
//! order (`weft_net::proxy::ordering`). Counter values are bounded by the 16 bits they travel
//! in as immediate data.

use crate::{FIFO_CONNECTION_BITS, FIFO_OP_BITS, FieldOutOfRange, FifoCommand};

device_enums! {
    /// What a [`TransferCmd`] asks the proxy to do (bits 14–15 of `control`).
    enum TransferKind {
        /// Write `len` bytes from this rank's buffer at `src` to the peer's buffer at `dst`.
        Write = 0,
        /// Add the signed value to the peer's counter, after every earlier update of the connection.
        CounterAdd = 1,
        /// Set the peer's counter to the value, after every earlier update of the connection.
        CounterSet = 2,
        /// Complete (pop) only once every earlier command of the connection is applied at the peer.
        Quiet = 3,
    }
}

device_structs! {
    /// One expert-parallel transfer command: a FIFO command of op `TRANSFER_FIFO_OP` (see the module docs).
    struct TransferCmd align(16) size(16) {
        /// Bits 0–30 bytes (Write) or counter index (CounterAdd/CounterSet), bit 31 the FIFO's valid bit.
        len: u32 => "uint32_t",
        /// Write: source byte offset; CounterAdd: the i16 value sign-extended; CounterSet: the u16 value.
        src: u32 => "uint32_t",
        /// Write: destination byte offset in the peer's buffer; otherwise zero.
        dst: u32 => "uint32_t",
        /// Bits 0–3 op (`TRANSFER_FIFO_OP`), 4–13 connection, 14–15 `TransferKind`, 31 the FIFO's valid bit.
        control: u32 => "uint32_t",
    }
}

/// The FIFO op number of a [`TransferCmd`] (one of the numbers 8–15 left to other layers).
pub const TRANSFER_FIFO_OP: u32 = 10;
/// Bit position of the connection in `control` (the FIFO command's connection field).
pub const TRANSFER_CONNECTION_SHIFT: u32 = FIFO_OP_BITS;
/// Bit position of the [`TransferKind`] in `control`.
pub const TRANSFER_KIND_SHIFT: u32 = FIFO_OP_BITS + FIFO_CONNECTION_BITS;
/// Width of the kind.
pub const TRANSFER_KIND_BITS: u32 = 2;
/// Width of a counter index: counters `0 .. 2^TRANSFER_COUNTER_BITS` per receiving rank.
pub const TRANSFER_COUNTER_BITS: u32 = 9;
/// Width of a counter update's value (`i16` for add, `u16` for set).
pub const TRANSFER_VALUE_BITS: u32 = 16;
/// Width of `len` for a write (bit 31 is the valid bit).
pub const TRANSFER_LEN_BITS: u32 = 31;

/// Constants of this module carried into the generated header: `(name, value, doc)`.
pub(crate) fn constants() -> Vec<(&'static str, u64, &'static str)> {
    vec![
        ("TRANSFER_FIFO_OP", TRANSFER_FIFO_OP.into(), "FIFO op number of a TransferCmd"),
        ("TRANSFER_CONNECTION_SHIFT", TRANSFER_CONNECTION_SHIFT.into(), "bit position of the connection in control"),
        ("TRANSFER_KIND_SHIFT", TRANSFER_KIND_SHIFT.into(), "bit position of the TransferKind in control"),
        ("TRANSFER_KIND_BITS", TRANSFER_KIND_BITS.into(), "width of the TransferKind"),
        ("TRANSFER_COUNTER_BITS", TRANSFER_COUNTER_BITS.into(), "width of a counter index"),
        ("TRANSFER_VALUE_BITS", TRANSFER_VALUE_BITS.into(), "width of a counter update's value"),
        ("TRANSFER_LEN_BITS", TRANSFER_LEN_BITS.into(), "width of a write's length"),
    ]
}

/// A counter update as it travels: add a signed 16-bit value or set an unsigned 16-bit one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterUpdate {
    /// `counter += value` (wrapping).
    Add(i16),
    /// `counter = value`.
    Set(u16),
}

impl CounterUpdate {
    /// The counter's value after this update.
    pub fn apply(self, counter: u64) -> u64 {
        match self {
            Self::Add(v) => counter.wrapping_add_signed(v.into()),
            Self::Set(v) => v.into(),
        }
    }
}

/// A decoded [`TransferCmd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transfer {
    /// Write bytes to the peer.
    Write {
        /// The proxy connection (one peer and channel).
        connection: u16,
        /// Source byte offset in this rank's buffer.
        src_offset: u32,
        /// Destination byte offset in the peer's buffer.
        dst_offset: u32,
        /// Bytes, `< 2^31`.
        len: u32,
    },
    /// Update one of the peer's counters, in the connection's order.
    Counter {
        /// The proxy connection (one peer and channel).
        connection: u16,
        /// Counter index, `< 2^TRANSFER_COUNTER_BITS`.
        counter: u16,
        /// The update.
        update: CounterUpdate,
    },
    /// Wait until everything earlier on the connection is applied at the peer.
    Quiet {
        /// The proxy connection (one peer and channel).
        connection: u16,
    },
}

/// A 32-bit word that is not a valid [`TransferCmd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MalformedTransfer {
    /// What is wrong.
    pub reason: &'static str,
    /// The command's `control` word.
    pub control: u32,
}

impl std::fmt::Display for MalformedTransfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed transfer command (control {:#010x}): {}", self.control, self.reason)
    }
}

impl std::error::Error for MalformedTransfer {}

const VALID_BIT: u32 = 1 << 31;

const fn mask(bits: u32) -> u32 {
    (1 << bits) - 1
}

fn check(field: &'static str, value: u32, bits: u32) -> Result<u32, FieldOutOfRange> {
    if value > mask(bits) {
        Err(FieldOutOfRange { field, value: value.into(), max: mask(bits).into() })
    } else {
        Ok(value)
    }
}

impl TransferCmd {
    /// Encodes `transfer` with the valid bits clear; fails when a field exceeds its bits.
    pub fn encode(transfer: Transfer) -> Result<Self, FieldOutOfRange> {
        let (connection, kind, len, src, dst) = match transfer {
            Transfer::Write { connection, src_offset, dst_offset, len } => {
                (connection, TransferKind::Write, check("len", len, TRANSFER_LEN_BITS)?, src_offset, dst_offset)
            }
            Transfer::Counter { connection, counter, update } => {
                let counter = check("counter", counter.into(), TRANSFER_COUNTER_BITS)?;
                match update {
                    // Sign-extended: the device writes `(uint32_t)(int32_t)value`.
                    CounterUpdate::Add(v) => (connection, TransferKind::CounterAdd, counter, i32::from(v) as u32, 0),
                    CounterUpdate::Set(v) => (connection, TransferKind::CounterSet, counter, v.into(), 0),
                }
            }
            Transfer::Quiet { connection } => (connection, TransferKind::Quiet, 0, 0, 0),
        };
        let connection = check("connection", connection.into(), FIFO_CONNECTION_BITS)?;
        let control =
            TRANSFER_FIFO_OP | (connection << TRANSFER_CONNECTION_SHIFT) | ((kind as u32) << TRANSFER_KIND_SHIFT);
        Ok(Self { len, src, dst, control })
    }

    /// Decodes the command (the valid bits are ignored); fails on another op, reserved bits set,
    /// or a counter value outside its 16 bits.
    pub fn decode(&self) -> Result<Transfer, MalformedTransfer> {
        let control = self.control & !VALID_BIT;
        let bad = |reason| MalformedTransfer { reason, control: self.control };
        if control & mask(FIFO_OP_BITS) != TRANSFER_FIFO_OP {
            return Err(bad("not a transfer op"));
        }
        if control >> (TRANSFER_KIND_SHIFT + TRANSFER_KIND_BITS) != 0 {
            return Err(bad("reserved control bits set"));
        }
        // Masked to 10 bits, so the cast cannot truncate.
        let connection = ((control >> TRANSFER_CONNECTION_SHIFT) & mask(FIFO_CONNECTION_BITS)) as u16;
        let len = self.len & !VALID_BIT;
        let kind = TransferKind::from_raw((control >> TRANSFER_KIND_SHIFT) & mask(TRANSFER_KIND_BITS))
            .ok_or(bad("unknown kind"))?;
        let counter = || u16::try_from(len).ok().filter(|&c| u32::from(c) <= mask(TRANSFER_COUNTER_BITS));
        Ok(match kind {
            TransferKind::Write => Transfer::Write { connection, src_offset: self.src, dst_offset: self.dst, len },
            TransferKind::CounterAdd => Transfer::Counter {
                connection,
                counter: counter().ok_or(bad("counter index out of range"))?,
                update: CounterUpdate::Add(i16::try_from(self.src as i32).map_err(|_| bad("add value outside i16"))?),
            },
            TransferKind::CounterSet => Transfer::Counter {
                connection,
                counter: counter().ok_or(bad("counter index out of range"))?,
                update: CounterUpdate::Set(u16::try_from(self.src).map_err(|_| bad("set value outside u16"))?),
            },
            TransferKind::Quiet => Transfer::Quiet { connection },
        })
    }

    /// The same 16 bytes as the FIFO command the proxy service reads.
    pub fn to_fifo_command(self) -> FifoCommand {
        FifoCommand {
            fst: u64::from(self.len) | (u64::from(self.src) << 32),
            snd: u64::from(self.dst) | (u64::from(self.control) << 32),
        }
    }

    /// The transfer command a FIFO command of op [`TRANSFER_FIFO_OP`] carries.
    pub fn from_fifo_command(command: &FifoCommand) -> Self {
        // Each cast takes 32 bits of a word on purpose.
        Self {
            len: command.fst as u32,
            src: (command.fst >> 32) as u32,
            dst: command.snd as u32,
            control: (command.snd >> 32) as u32,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use crate::FifoCommandFields;

    fn samples() -> Vec<Transfer> {
        let mut all = vec![
            Transfer::Write { connection: 0, src_offset: 0, dst_offset: 0, len: 0 },
            Transfer::Write { connection: 1023, src_offset: u32::MAX, dst_offset: u32::MAX, len: (1 << 31) - 1 },
            Transfer::Quiet { connection: 7 },
        ];
        for update in [CounterUpdate::Add(i16::MIN), CounterUpdate::Add(-1), CounterUpdate::Add(i16::MAX)]
            .into_iter()
            .chain([CounterUpdate::Set(0), CounterUpdate::Set(u16::MAX)])
        {
            all.push(Transfer::Counter { connection: 513, counter: 511, update });
            all.push(Transfer::Counter { connection: 0, counter: 0, update });
        }
        all
    }

    #[test]
    fn every_kind_round_trips_at_its_extremes_and_keeps_the_fifo_fields() {
        for transfer in samples() {
            let cmd = TransferCmd::encode(transfer).unwrap();
            assert_eq!(cmd.decode().unwrap(), transfer);
            let fifo = cmd.to_fifo_command();
            assert_eq!(fifo.valid_bits(), [false, false]);
            assert_eq!(u32::from(fifo.op()), TRANSFER_FIFO_OP);
            let connection = match transfer {
                Transfer::Write { connection, .. }
                | Transfer::Counter { connection, .. }
                | Transfer::Quiet { connection } => connection,
            };
            assert_eq!(fifo.fields().connection, connection, "the connection sits in the FIFO's field");
            // The valid bits the FIFO sets on a lap change nothing the decoder reads.
            let on_lap_0 = TransferCmd::from_fifo_command(&fifo.for_position(0, 4));
            assert_eq!(on_lap_0.len >> 31, 1);
            assert_eq!(on_lap_0.control >> 31, 1);
            assert_eq!(on_lap_0.decode().unwrap(), transfer);
        }
    }

    #[test]
    fn the_words_lie_where_the_fifo_command_has_them() {
        let fields = FifoCommandFields {
            op: TRANSFER_FIFO_OP as u8,
            connection: 9,
            src_memory: (TransferKind::CounterSet as u8),
            size: 5,
            src_offset: 300,
            ..Default::default()
        };
        let fifo = FifoCommand::encode(fields).unwrap();
        let transfer = TransferCmd::from_fifo_command(&fifo).decode().unwrap();
        assert_eq!(transfer, Transfer::Counter { connection: 9, counter: 5, update: CounterUpdate::Set(300) });
        assert_eq!(core::mem::offset_of!(TransferCmd, control), 12);
        assert_eq!(core::mem::size_of::<TransferCmd>(), core::mem::size_of::<FifoCommand>());
    }

    #[test]
    fn out_of_range_fields_and_foreign_words_are_refused() {
        let write = |len| Transfer::Write { connection: 0, src_offset: 0, dst_offset: 0, len };
        assert_eq!(TransferCmd::encode(write(1 << 31)).unwrap_err().field, "len");
        let counter = Transfer::Counter { connection: 0, counter: 512, update: CounterUpdate::Add(1) };
        assert_eq!(TransferCmd::encode(counter).unwrap_err().field, "counter");
        assert_eq!(TransferCmd::encode(Transfer::Quiet { connection: 1024 }).unwrap_err().field, "connection");
        let good = TransferCmd::encode(Transfer::Quiet { connection: 1 }).unwrap();
        assert!(TransferCmd { control: good.control & !0xf | 3, ..good }.decode().is_err(), "another op");
        assert!(TransferCmd { control: good.control | 1 << 16, ..good }.decode().is_err(), "reserved bit");
        let add = TransferCmd::encode(Transfer::Counter { connection: 0, counter: 1, update: CounterUpdate::Add(-2) })
            .unwrap();
        assert_eq!(add.src, u32::MAX - 1, "sign-extended");
        assert!(TransferCmd { src: 1 << 15, ..add }.decode().is_err(), "add outside i16");
        let set = TransferCmd::encode(Transfer::Counter { connection: 0, counter: 1, update: CounterUpdate::Set(2) })
            .unwrap();
        assert!(TransferCmd { src: 1 << 16, ..set }.decode().is_err(), "set outside u16");
        assert!(TransferCmd { len: 512, ..set }.decode().is_err(), "counter index outside 9 bits");
    }

    #[test]
    fn counter_updates_add_wrapping_and_set() {
        assert_eq!(CounterUpdate::Add(-1).apply(0), u64::MAX);
        assert_eq!(CounterUpdate::Add(5).apply(u64::MAX), 4);
        assert_eq!(CounterUpdate::Set(7).apply(123), 7);
    }
}

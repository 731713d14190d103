//! Refusals: why a receiver failed its connection, as the immediate of a zero-length RDMA write
//! with immediate it sends the peer (see the module docs of the transport).
//!
//! A signal's immediate is a [`ConnectionId`](crate::proxy::transport::ConnectionId), 16 bits,
//! so a write's immediate with bit 31 set is never a signal: it is a refusal, its reason code in
//! bits 8..16 and the wire sequence number it concerns, if any, in bits 0..8. (A counter
//! update's immediate cannot carry it: every 32-bit word is a valid counter update.)

use std::fmt;

use crate::proxy::counters::CounterError;
use crate::proxy::ordering::OrderingError;

/// Set in the immediate of every refusal, never in a signal's.
const REFUSAL_FLAG: u32 = 1 << 31;

/// Why a receiver refused an inbound operation and failed the connection. The receiver's own
/// error keeps the full story; this is what fits in an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A reason the code does not name (or a newer peer's code, kept).
    Unspecified {
        /// The reason code.
        code: u8,
    },
    /// A counter update arrived on a connection with no counters registered.
    NoCounters,
    /// A counter update arrived further ahead than the ordering window allows.
    BeyondWindow {
        /// Its wire sequence number.
        seq: u8,
    },
    /// Two different counter updates arrived with one sequence number.
    ConflictingDuplicate {
        /// The wire sequence number.
        seq: u8,
    },
    /// A counter update never arrived: the hole outlived the gap timeout.
    Missing {
        /// The missing wire sequence number.
        seq: u8,
    },
    /// Applying an inbound operation to the receiver's memory or counters failed.
    Store,
    /// A signal named another connection than the one whose queue pair it arrived on.
    MisdirectedSignal,
}

impl Refusal {
    /// Its immediate.
    pub(super) fn encode(self) -> u32 {
        let (code, seq) = match self {
            Self::Unspecified { code } => (code, 0),
            Self::NoCounters => (1, 0),
            Self::BeyondWindow { seq } => (2, seq),
            Self::ConflictingDuplicate { seq } => (3, seq),
            Self::Missing { seq } => (4, seq),
            Self::Store => (5, 0),
            Self::MisdirectedSignal => (6, 0),
        };
        REFUSAL_FLAG | u32::from(code) << 8 | u32::from(seq)
    }

    /// The refusal a write's immediate carries, or `None` for a signal's.
    pub(super) fn decode(imm: u32) -> Option<Self> {
        if imm & REFUSAL_FLAG == 0 {
            return None;
        }
        let [.., code, seq] = imm.to_be_bytes();
        Some(match code {
            1 => Self::NoCounters,
            2 => Self::BeyondWindow { seq },
            3 => Self::ConflictingDuplicate { seq },
            4 => Self::Missing { seq },
            5 => Self::Store,
            6 => Self::MisdirectedSignal,
            code => Self::Unspecified { code },
        })
    }
}

impl From<&CounterError> for Refusal {
    fn from(e: &CounterError) -> Self {
        match e {
            CounterError::Unregistered { .. } => Self::NoCounters,
            CounterError::Ordering(OrderingError::BeyondWindow { seq, .. }) => Self::BeyondWindow { seq: *seq },
            CounterError::Ordering(OrderingError::ConflictingDuplicate { seq, .. }) => {
                Self::ConflictingDuplicate { seq: *seq }
            }
            CounterError::Ordering(OrderingError::GapTimeout { missing, .. }) => Self::Missing { seq: *missing },
            CounterError::Store { .. } => Self::Store,
            _ => Self::Unspecified { code: 0 },
        }
    }
}

/// The sender's text, worded as the receiver's error words the same reason.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unspecified { code } => write!(f, "it refused an inbound operation (reason code {code})"),
            Self::NoCounters => write!(f, "a counter update arrived on a connection which has no counters registered"),
            Self::BeyondWindow { seq } => write!(f, "counter update: sequence {seq} is beyond the window"),
            Self::ConflictingDuplicate { seq } => {
                write!(f, "counter update: sequence {seq} arrived twice with different contents")
            }
            Self::Missing { seq } => write!(f, "counter update: sequence {seq} missing past the gap timeout"),
            Self::Store => write!(f, "applying an inbound operation to its memory failed"),
            Self::MisdirectedSignal => write!(f, "a signal arrived on the queue pair of another connection"),
        }
    }
}

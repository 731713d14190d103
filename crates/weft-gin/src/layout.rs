//! Where everything lies in a rank's heap and local state (the layout `DevCommHandle`
//! documents and `gin.cuh` computes from the counts): the same on every rank, so a window's
//! offset names the same bytes everywhere.

use weft_types::GIN_STAGING_SLOTS;

use crate::{GinError, Requirements};

/// Alignment of every window in the heap.
pub const WINDOW_ALIGN: u64 = 256;

/// The heap of one rank: signals at 0, the staging area, then the windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapLayout {
    /// Offset of the `put_value` staging area.
    pub staging_offset: u64,
    /// `(offset, bytes)` of each window.
    pub windows: Vec<(u64, u64)>,
    /// Bytes of the heap.
    pub heap_bytes: u64,
    /// Bytes of the local state (counters, signal bases, barrier epochs, staging flags).
    pub state_bytes: u64,
}

impl HeapLayout {
    /// The layout of `r`'s resources. The heap stays under 4 GiB: the proxy's commands carry
    /// 32-bit offsets.
    pub fn new(r: &Requirements) -> Result<Self, GinError> {
        let slots = u64::from(r.signal_slots());
        let staging_offset = (8 * slots).next_multiple_of(16);
        let mut end = staging_offset + 8 * GIN_STAGING_SLOTS as u64;
        let mut windows = Vec::with_capacity(r.windows.len());
        for &bytes in &r.windows {
            let offset = end.next_multiple_of(WINDOW_ALIGN);
            end =
                offset.checked_add(bytes).ok_or_else(|| GinError::Requirements(format!("window of {bytes} bytes")))?;
            windows.push((offset, bytes));
        }
        let heap_bytes = end.next_multiple_of(WINDOW_ALIGN);
        if heap_bytes > 1 << 32 {
            return Err(GinError::Requirements(format!(
                "signals, staging and windows take {heap_bytes} bytes (the heap is at most 4 GiB: proxy offsets are 32-bit)"
            )));
        }
        let barriers = u64::from(r.world_barriers) + u64::from(r.lsa_barriers);
        let state_bytes = 8 * (u64::from(r.counters) + slots + barriers) + 4 * GIN_STAGING_SLOTS as u64;
        Ok(Self { staging_offset, windows, heap_bytes, state_bytes })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn windows_follow_signals_and_staging_aligned_and_disjoint() {
        let r =
            Requirements { signals: 3, counters: 2, world_barriers: 1, lsa_barriers: 1, windows: vec![100, 4096, 1] };
        let l = HeapLayout::new(&r).unwrap();
        assert_eq!(l.staging_offset, 48);
        let staging_end = 48 + 8 * GIN_STAGING_SLOTS as u64;
        let mut prev_end = staging_end;
        for &(offset, bytes) in &l.windows {
            assert_eq!(offset % WINDOW_ALIGN, 0);
            assert!(offset >= prev_end);
            prev_end = offset + bytes;
        }
        assert_eq!(l.windows.len(), 3);
        assert!(l.heap_bytes >= prev_end);
        assert_eq!(l.state_bytes, 8 * (2 + 5 + 2) + 4 * GIN_STAGING_SLOTS as u64);
    }

    #[test]
    fn a_heap_past_4_gib_is_refused() {
        let r = Requirements { windows: vec![3 << 30, 1 << 30], ..Default::default() };
        let e = HeapLayout::new(&r).unwrap_err().to_string();
        assert!(e.contains("at most 4 GiB"), "{e}");
    }
}

//! Windows: user buffers registered collectively (NCCL's symmetric windows,
//! `ncclCommWindowRegister`), mapped by every peer once, so that any later call whose output
//! lies inside a window writes straight into the peers' buffers, eager calls included, with no
//! per-call exchange.
//!
//! Registration ([`crate::Collectives::register_window`]) is collective: every rank registers
//! one buffer of the same length, in the same order as the other ranks, and the ranks exchange
//! one [`WindowOffer`] each (the buffer's address, the allocation's offset and its memory
//! descriptor). Each rank maps every peer's allocation and keeps, per window, where every
//! rank's buffer starts in its own address space. A second exchange of one byte says whether
//! every rank mapped every peer, so a failure on one rank fails the registration on all.
//!
//! A call then looks its output range up in the [`WindowTable`]: inside one window at offset
//! `o`, rank r's output is window r's start + `o` (the contract NCCL states for symmetric
//! windows: every rank passes the same offset of the same window). Every rank takes the same
//! decision as long as every rank's buffer lies in the window registered at the same position
//! (ordinal) at the same offset; the lookup checks what one rank can check alone: the range
//! lies wholly inside one window (a range that straddles a window's end stages), the offset
//! keeps the 16-byte alignment every window start has, and the range fits the window, which
//! has the same length on every rank, so no peer is ever written past its window.
//!
//! Deregistration ([`crate::Collectives::deregister_window`]) is collective too (a barrier
//! between every rank, then the unmapping), and must follow the completion of every call that
//! used the window on every rank (NCCL's contract: deregister after the work is done).
//!
//! Wire format of an offer (little-endian): `usable u8` then, usable, `address u64 | length u64
//! | offset in the allocation u64 | descriptor (u32 length + bytes)`; not usable, the reason
//! (u32 length + UTF-8 bytes).

use weft_bootstrap::codec::{CodecError, Reader, Writer};
use weft_gpu::DevicePtr;
use weft_types::MAX_RANKS;

/// A registered window, as the caller holds it: pass it back to
/// [`crate::Collectives::deregister_window`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// Unique per communicator, in registration order (the same on every rank).
    pub(crate) id: u64,
    /// First byte of this rank's buffer.
    pub base: DevicePtr,
    /// Bytes of the window (the same on every rank).
    pub len: u64,
}

/// One rank's contribution to a window registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WindowOffer {
    /// This rank cannot register the buffer, and why (every rank then fails naming it).
    Unusable(String),
    /// The buffer starts at `address`, `offset` bytes into the allocation `descriptor` (the
    /// encoded memory descriptor of the whole allocation) describes.
    Usable { address: DevicePtr, len: u64, offset: u64, descriptor: Vec<u8> },
}

impl WindowOffer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let bytes = |w: &mut Writer, b: &[u8]| {
            // A descriptor or a reason is at most a few hundred bytes.
            w.put_u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
            w.put_bytes(&b[..b.len().min(u32::MAX as usize)]);
        };
        match self {
            WindowOffer::Unusable(why) => {
                w.put_u8(0);
                bytes(&mut w, why.as_bytes());
            }
            WindowOffer::Usable { address, len, offset, descriptor } => {
                w.put_u8(1);
                for field in [*address, *len, *offset] {
                    w.put_u64(field);
                }
                bytes(&mut w, descriptor);
            }
        }
        w.into_inner()
    }

    pub(crate) fn decode(input: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(input);
        let offer = match r.u8()? {
            0 => {
                let len = r.u32()? as usize;
                WindowOffer::Unusable(String::from_utf8_lossy(r.take(len)?).into_owned())
            }
            1 => {
                let (address, len, offset) = (r.u64()?, r.u64()?, r.u64()?);
                let n = r.u32()? as usize;
                WindowOffer::Usable { address, len, offset, descriptor: r.take(n)?.to_vec() }
            }
            other => return Err(CodecError::InvalidValue { field: "window offer kind", value: other.into() }),
        };
        r.finish()?;
        Ok(offer)
    }
}

/// Why the gathered offers of one registration (`offers[r]`: rank r's) cannot make a window,
/// if they cannot: a rank refused, a length differs from rank 0's, or a rank sent garbage.
/// The same answer on every rank, since every rank sees the same offers.
pub(crate) fn offers_mismatch(offers: &[Result<WindowOffer, String>]) -> Option<String> {
    if offers.len() > MAX_RANKS {
        return Some(format!("{} ranks (windows cover at most {MAX_RANKS})", offers.len()));
    }
    let mut first_len = None;
    for (rank, offer) in offers.iter().enumerate() {
        match offer {
            Err(e) => return Some(format!("rank {rank}'s offer is malformed: {e}")),
            Ok(WindowOffer::Unusable(why)) => return Some(format!("rank {rank} cannot register its buffer: {why}")),
            Ok(WindowOffer::Usable { len, .. }) => match first_len {
                None => first_len = Some(*len),
                Some(l) if l != *len => {
                    return Some(format!("rank {rank} registers {len} bytes, rank 0 {l}: windows have one length"));
                }
                Some(_) => {}
            },
        }
    }
    None
}

/// Where a call's range lies among the windows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placement<'a, T> {
    /// In no window.
    Outside,
    /// Inside `window` at `offset` (16-byte aligned), wholly.
    Inside { window: &'a T, offset: u64 },
    /// Partly inside a window, or at an offset without the window start's alignment: the call
    /// stages, and says why at debug level.
    Unfit(&'static str),
}

/// One window's entry: its range on this rank and what the caller keeps with it.
#[derive(Debug)]
struct Entry<T> {
    window: Window,
    value: T,
}

/// This rank's windows, sorted by start address; pure bookkeeping (lookup, overlap refusal,
/// removal), generic over what each window carries so it is testable without a GPU.
#[derive(Debug)]
pub(crate) struct WindowTable<T> {
    entries: Vec<Entry<T>>,
    next_id: u64,
}

impl<T> Default for WindowTable<T> {
    fn default() -> Self {
        Self { entries: Vec::new(), next_id: 0 }
    }
}

impl<T> WindowTable<T> {
    /// Why `[base, base + len)` cannot become a window here, if it cannot: empty, not 16-byte
    /// aligned, wrapping, or overlapping a registered window.
    pub(crate) fn check_new(&self, base: DevicePtr, len: u64) -> Result<(), String> {
        if len == 0 {
            return Err("a window of 0 bytes".into());
        }
        if !base.is_multiple_of(16) {
            return Err(format!("window start {base:#x} is not 16-byte aligned"));
        }
        let end = base.checked_add(len).ok_or_else(|| format!("window {base:#x} + {len} wraps"))?;
        if let Some(e) = self.entries.iter().find(|e| e.window.base < end && base < e.window.base + e.window.len) {
            return Err(format!(
                "[{base:#x}, {end:#x}) overlaps the window [{:#x}, {:#x})",
                e.window.base,
                e.window.base + e.window.len
            ));
        }
        Ok(())
    }

    /// Adds a window after [`Self::check_new`] accepted it.
    pub(crate) fn insert(&mut self, base: DevicePtr, len: u64, value: T) -> Result<Window, String> {
        self.check_new(base, len)?;
        let window = Window { id: self.next_id, base, len };
        self.next_id += 1;
        let at = self.entries.partition_point(|e| e.window.base < base);
        self.entries.insert(at, Entry { window, value });
        Ok(window)
    }

    /// Removes `window`; `None` when it is not one of this table's.
    pub(crate) fn remove(&mut self, window: &Window) -> Option<T> {
        let at = self.entries.iter().position(|e| e.window == *window)?;
        Some(self.entries.remove(at).value)
    }

    /// Whether `window` is one of this table's.
    pub(crate) fn contains(&self, window: &Window) -> bool {
        self.entries.iter().any(|e| e.window == *window)
    }

    /// Whether no window is registered (the per-call path then skips the lookup).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `[ptr, ptr + len)` lies (binary search: no allocation, no lock beyond the
    /// caller's).
    pub(crate) fn find(&self, ptr: DevicePtr, len: u64) -> Placement<'_, T> {
        let at = self.entries.partition_point(|e| e.window.base <= ptr);
        let Some(e) = at.checked_sub(1).map(|i| &self.entries[i]) else {
            return self.straddles(ptr, len);
        };
        let (base, wlen) = (e.window.base, e.window.len);
        if ptr >= base + wlen {
            return self.straddles(ptr, len);
        }
        let offset = ptr - base;
        if offset.checked_add(len).is_none_or(|end| end > wlen) {
            return Placement::Unfit("the buffer runs past the end of its window");
        }
        if !offset.is_multiple_of(16) {
            return Placement::Unfit("the buffer's offset in its window is not 16-byte aligned");
        }
        Placement::Inside { window: &e.value, offset }
    }

    /// A range starting outside every window: outside, or straddling the next window's start.
    fn straddles(&self, ptr: DevicePtr, len: u64) -> Placement<'_, T> {
        let end = ptr.saturating_add(len);
        if self.entries.iter().any(|e| e.window.base > ptr && e.window.base < end) {
            Placement::Unfit("the buffer starts before a window and runs into it")
        } else {
            Placement::Outside
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> WindowTable<&'static str> {
        let mut t = WindowTable::default();
        assert_eq!(t.insert(0x10_0000, 0x1000, "b").unwrap().id, 0);
        assert_eq!(t.insert(0x1000, 0x1000, "a").unwrap().id, 1);
        t
    }

    #[test]
    fn a_range_is_found_inside_one_window_at_its_offset() {
        let t = table();
        assert_eq!(t.find(0x1000, 0x1000), Placement::Inside { window: &"a", offset: 0 });
        assert_eq!(t.find(0x1100, 0x10), Placement::Inside { window: &"a", offset: 0x100 });
        assert_eq!(t.find(0x10_0ff0, 0x10), Placement::Inside { window: &"b", offset: 0xff0 });
        assert_eq!(t.find(0x0, 0x10), Placement::Outside);
        assert_eq!(t.find(0x2000, 0x100), Placement::Outside);
        assert_eq!(t.find(0x20_0000, 0x100), Placement::Outside);
    }

    #[test]
    fn ranges_past_an_edge_or_misaligned_stage() {
        let t = table();
        assert!(matches!(t.find(0x1ff0, 0x20), Placement::Unfit(why) if why.contains("past the end")));
        assert!(matches!(t.find(0xff0, 0x20), Placement::Unfit(why) if why.contains("runs into it")));
        assert!(matches!(t.find(0x1008, 0x8), Placement::Unfit(why) if why.contains("aligned")));
        assert!(matches!(t.find(0x1000, u64::MAX), Placement::Unfit(_)));
    }

    #[test]
    fn overlapping_empty_and_misaligned_windows_are_refused() {
        let mut t = table();
        assert!(t.check_new(0x1800, 0x1000).unwrap_err().contains("overlaps"));
        assert!(t.check_new(0x800, 0x1000).unwrap_err().contains("overlaps"));
        assert!(t.check_new(0x0, 0x10_0000 + 1).unwrap_err().contains("overlaps"));
        assert!(t.check_new(0x3000, 0).unwrap_err().contains("0 bytes"));
        assert!(t.check_new(0x3008, 0x10).unwrap_err().contains("aligned"));
        assert!(t.check_new(u64::MAX - 15, 0x20).unwrap_err().contains("wraps"));
        assert!(t.insert(0x1000, 0x10, "again").is_err());
        // Adjacent windows are fine.
        assert_eq!(t.insert(0x2000, 0x10, "c").unwrap().id, 2);
        assert_eq!(t.find(0x2000, 0x10), Placement::Inside { window: &"c", offset: 0 });
    }

    #[test]
    fn removal_takes_exactly_the_registered_window() {
        let mut t = table();
        let a = Window { id: 1, base: 0x1000, len: 0x1000 };
        assert_eq!(t.remove(&Window { id: 7, ..a }), None, "unknown id");
        assert_eq!(t.remove(&Window { len: 0x800, ..a }), None, "other length");
        assert_eq!(t.remove(&a), Some("a"));
        assert_eq!(t.remove(&a), None, "twice");
        assert_eq!(t.find(0x1000, 0x10), Placement::Outside);
        assert!(!t.is_empty());
        assert_eq!(t.insert(0x1000, 0x1000, "a2").unwrap().id, 2, "ids are never reused");
        assert!(!t.contains(&a));
    }

    #[test]
    fn offers_round_trip_and_reject_garbage() {
        for offer in [
            WindowOffer::Unusable("stream-ordered pool memory".into()),
            WindowOffer::Usable { address: 0x7f00_0000_0100, len: 4096, offset: 256, descriptor: vec![1, 2, 3] },
        ] {
            assert_eq!(WindowOffer::decode(&offer.encode()).unwrap(), offer);
        }
        assert!(WindowOffer::decode(&[]).is_err());
        assert!(WindowOffer::decode(&[2]).is_err());
        let mut trailing = WindowOffer::Unusable(String::new()).encode();
        trailing.push(0);
        assert!(WindowOffer::decode(&trailing).is_err());
    }

    #[test]
    fn every_rank_must_offer_the_same_length() {
        let ok = |len| Ok(WindowOffer::Usable { address: 0x1000, len, offset: 0, descriptor: Vec::new() });
        assert_eq!(offers_mismatch(&[ok(64), ok(64)]), None);
        assert!(offers_mismatch(&[ok(64), ok(128)]).unwrap().contains("rank 1 registers 128 bytes, rank 0 64"));
        let refused = Ok(WindowOffer::Unusable("not device memory".into()));
        assert!(offers_mismatch(&[ok(64), refused]).unwrap().contains("rank 1 cannot register its buffer"));
        assert!(offers_mismatch(&[Err("short".into()), ok(64)]).unwrap().contains("rank 0's offer is malformed"));
        assert!(offers_mismatch(&vec![ok(64); MAX_RANKS + 1]).unwrap().contains("at most"));
    }
}

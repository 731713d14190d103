//! The device side of one trace: the ring a traced module writes into, set into each module's
//! `weft_trace_ring` global, and read back once the GPU is idle.

use weft_gpu::{Device, DeviceBuffer, GpuError, Module};

use super::chrome::RankTrace;
use super::layout::{Record, Ring};
use super::table::KERNELS;

/// The module global every traced module defines (weft/trace.cuh).
pub const RING_GLOBAL: &str = "weft_trace_ring";

/// How a [`Recorder`] samples and how much it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// Record calls whose number (per kernel) is a multiple of this; 1: every call.
    pub every: u32,
    /// Records the ring keeps; older ones are overwritten.
    pub capacity: u32,
}

impl Default for Sampling {
    /// Every call, into a ring of 2^20 records (24 MiB).
    fn default() -> Self {
        Self { every: 1, capacity: 1 << 20 }
    }
}

/// One rank's ring on one device, shared by every traced module attached to it.
#[derive(Debug)]
pub struct Recorder {
    records: DeviceBuffer<u8>,
    /// `[cursor, dropped]`.
    counts: DeviceBuffer<u64>,
    /// `[launches; KERNELS.len()]` then `[arrivals; KERNELS.len()]`.
    calls: DeviceBuffer<u32>,
    sampling: Sampling,
}

impl Recorder {
    /// A zeroed ring on `device`.
    pub fn new(device: &Device, sampling: Sampling) -> Result<Self, GpuError> {
        let sampling = Sampling { every: sampling.every.max(1), capacity: sampling.capacity.max(1) };
        let mut records = DeviceBuffer::new(device, sampling.capacity as usize * Record::BYTES)?;
        records.as_mut_slice().fill_bytes(0)?;
        let counts = DeviceBuffer::from_host(device, &[0u64; 2])?;
        let calls = DeviceBuffer::from_host(device, &vec![0u32; 2 * KERNELS.len()])?;
        Ok(Self { records, counts, calls, sampling })
    }

    /// The ring as a traced module sees it.
    pub fn ring(&self) -> Ring {
        let word = std::mem::size_of::<u64>() as u64;
        Ring {
            records: self.records.ptr(),
            cursor: self.counts.ptr(),
            dropped: self.counts.ptr() + word,
            launches: self.calls.ptr(),
            arrivals: self.calls.ptr() + 4 * KERNELS.len() as u64,
            capacity: self.sampling.capacity,
            sample: self.sampling.every,
        }
    }

    /// Points `module` (compiled with `WEFT_TRACE_ENABLED`) at this ring; no kernel of the
    /// module may be running.
    pub fn attach(&self, module: &Module) -> Result<(), GpuError> {
        module.write_global(RING_GLOBAL, &self.ring().to_bytes())
    }

    /// The records so far, as rank `rank`'s, and empties the ring (the kernels' call counts
    /// go on). Every kernel writing into the ring must have ended (synchronize the device
    /// first).
    pub fn take(&mut self, rank: u32) -> Result<RankTrace, GpuError> {
        let counts = self.counts.to_vec()?;
        let (claimed, dropped) = (counts[0], counts[1]);
        let capacity = u64::from(self.sampling.capacity);
        let kept = claimed.min(capacity);
        // Until the ring wraps, only its first `claimed` records were written.
        let written = if claimed <= capacity { claimed as usize * Record::BYTES } else { self.records.len() };
        let bytes = self.records.slice(..written)?.to_vec()?;
        let records = ring_slots(claimed, capacity)
            .filter_map(|slot| Record::from_bytes(bytes.get(slot * Record::BYTES..)?))
            .collect();
        self.counts.copy_from_host(&[0, 0])?;
        Ok(RankTrace { rank, records, dropped, overwritten: claimed - kept })
    }
}

/// The slots of the records a ring of `capacity` holds after `claimed` were written, oldest
/// first: the last `capacity` of them, record `i` at slot `i % capacity`.
fn ring_slots(claimed: u64, capacity: u64) -> impl Iterator<Item = usize> {
    (claimed - claimed.min(capacity)..claimed).map(move |i| (i % capacity) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_yields_its_newest_records_oldest_first() {
        assert_eq!(ring_slots(3, 4).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(ring_slots(6, 4).collect::<Vec<_>>(), [2, 3, 0, 1]);
        assert_eq!(ring_slots(0, 4).count(), 0);
    }
}

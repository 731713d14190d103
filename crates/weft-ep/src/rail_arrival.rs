//! The rail hop's rows as they arrive, chunk by chunk (docs/ep.md, "Overlapping the rail
//! hop"): how many chunks a pair of rail peers splits its rows into, how many increments of the
//! phase's signal each source node has made so far (the counts a reader's waits need), and what
//! runs beside the caller's stream: a dispatch's exchange, putting each chunk as the pack
//! beside it finishes it, or a combine's flush.
//!
//! Both ends of a pair derive the split from the same number, the rows one sends the other,
//! which the notify's exchange of counts gave every rank alike; so a reader never takes a
//! count of increments for a chunk its source did not put.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use weft_gpu::{AllocKind, Device, DeviceMemory, Event, GpuError, Stream};
use weft_types::{EpRailArgs, EpRailArrival, WaitContext};

use crate::launch::RAIL_THREADS;
use crate::region::{MAX_CHANNELS, MAX_RANKS};

/// Rows per chunk the split aims at (64 rows of DeepEP's 7168 BF16 channels are 896 KiB).
pub(crate) const RAIL_CHUNK_ROWS: u32 = 64;
/// The most chunks a pair's rows split into: with five puts per chunk (the dispatch's field
/// arrays) and up to seven rail peers, 560 commands, within the proxy FIFO's 1024.
pub(crate) const RAIL_MAX_CHUNKS: u32 = 16;
const _: () = assert!(RAIL_MAX_CHUNKS * crate::launch::RAIL_DISPATCH_PUTS * (MAX_RANKS as u32 - 1) <= 1024);

/// The chunks `rows` rows split into: one per [`RAIL_CHUNK_ROWS`] begun, at least 1 (a call
/// without rows still raises the signal once per field array), at most [`RAIL_MAX_CHUNKS`].
pub(crate) fn rail_chunks(rows: u32) -> u32 {
    rows.div_ceil(RAIL_CHUNK_ROWS).clamp(1, RAIL_MAX_CHUNKS)
}

/// The rail phases: a dispatch's rows, a combine's partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RailPhase {
    Dispatch = 0,
    Combine = 1,
}

/// Per phase and source node: the increments of the phase's signal this rank's rail peer on
/// that node has made in the calls so far (what its signal word has reached once they landed).
#[derive(Debug, Default)]
pub(crate) struct RailSignals(Mutex<[[u64; MAX_RANKS]; 2]>);

/// A source node's rows of one call, as the reader sees them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Source {
    /// The signal word counting its rail peer's increments (0: rows already here).
    pub(crate) word: u64,
    /// Its rail peer, the rank a wait names.
    pub(crate) peer: u32,
    /// Its first row in the reader's input.
    pub(crate) from: u32,
    /// Its rows.
    pub(crate) rows: u32,
}

impl RailSignals {
    /// The arrival of one call's rows of `phase` from `sources` (one per node), each chunk
    /// bringing `puts` increments; counts the call's increments as made, so the next call's
    /// waits start after them. Waits give up as `wait` says.
    pub(crate) fn claim(&self, phase: RailPhase, sources: &[Source], puts: u32, wait: WaitContext) -> EpRailArrival {
        let mut made = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let made = &mut made[phase as usize];
        let mut a = EpRailArrival { wait, puts, nodes: sources.len() as u32, ..Default::default() };
        for (s, source) in sources.iter().enumerate().take(MAX_RANKS) {
            (a.words[s], a.peers[s], a.from[s], a.rows[s]) = (source.word, source.peer, source.from, source.rows);
            a.chunks[s] = rail_chunks(source.rows);
            if source.word != 0 {
                a.base[s] = made[s];
                made[s] += u64::from(puts) * u64::from(a.chunks[s]);
            }
        }
        a
    }
}

/// What a rank's rail hop runs beside the caller's stream: a stream of the device's greatest
/// priority (its one small block is scheduled first when SMs free up), the event that starts
/// its work after the caller's, and the words a pack publishes its progress in
/// (`EpRailArgs::progress`) with the epoch of the last call.
#[derive(Debug)]
pub(crate) struct RailSide {
    pub(crate) stream: Stream,
    ready: Event,
    progress: DeviceMemory,
    epoch: AtomicU32,
}

/// Warps of a rail pack at most: its grid is at most `2 * MAX_CHANNELS` blocks of 16 warps.
const MAX_PACK_WARPS: usize = 2 * MAX_CHANNELS * (RAIL_THREADS as usize / 32);

impl RailSide {
    pub(crate) fn new(device: &Device) -> Result<Self, GpuError> {
        let progress = DeviceMemory::alloc(device, 8 * MAX_PACK_WARPS, AllocKind::Legacy)?;
        progress.fill(0, 8 * MAX_PACK_WARPS, 0)?;
        let (stream, ready) = (Stream::with_greatest_priority(device)?, Event::marker(device)?);
        Ok(Self { stream, ready, progress, epoch: AtomicU32::new(0) })
    }

    /// Makes the side stream's next work wait for everything enqueued on `main` so far.
    pub(crate) fn follow(&self, main: &Stream) -> Result<(), GpuError> {
        self.ready.record(main)?;
        self.stream.wait_event(&self.ready)
    }

    /// `args` of a pack on `blocks` blocks that publishes its progress for the exchange beside
    /// it: this side's words, under a fresh epoch (no word holds a value of it yet).
    pub(crate) fn beside_pack(&self, args: EpRailArgs, blocks: u32) -> EpRailArgs {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
        let warps = (blocks.max(1) * (RAIL_THREADS / 32)).min(MAX_PACK_WARPS as u32);
        EpRailArgs { progress: self.progress.ptr(), progress_epoch: epoch, progress_warps: warps, ..args }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's `rail_chunk_begin` and `rail_row_target` (rail_arrival.cuh), on the host.
    fn chunk_begin(rows: u64, chunks: u32, k: u32) -> u64 {
        rows * u64::from(k) / u64::from(chunks)
    }
    fn row_target(a: &EpRailArrival, s: usize, offset: u32) -> u64 {
        let (rows, chunks) = (u64::from(a.rows[s]), u64::from(a.chunks[s]));
        let k = ((u64::from(offset) + 1) * chunks).div_ceil(rows) - 1;
        a.base[s] + u64::from(a.puts) * (k + 1)
    }

    #[test]
    fn splits_aim_at_sixty_four_rows_and_never_exceed_sixteen_chunks() {
        assert_eq!(rail_chunks(0), 1);
        assert_eq!(rail_chunks(1), 1);
        assert_eq!(rail_chunks(64), 1);
        assert_eq!(rail_chunks(65), 2);
        assert_eq!(rail_chunks(4079), RAIL_MAX_CHUNKS);
    }

    /// Every row's target is reached only once the chunk holding it was put, and reached by
    /// then: the puts of a call, replayed in order (the source's puts chunk by chunk, each
    /// raising the count once per field array), cover each row exactly when its chunk is done.
    #[test]
    fn a_rows_target_is_the_count_after_its_own_chunks_puts() {
        let signals = RailSignals::default();
        let wait = WaitContext::default();
        let mut made = 0u64; // what the source's word reached after the calls so far
        for rows in [0u32, 1, 5, 63, 64, 65, 200, 1023, 4079] {
            let sources = [Source::default(), Source { word: 8, peer: 3, from: 17, rows }];
            let a = signals.claim(RailPhase::Dispatch, &sources, 5, wait);
            assert_eq!((a.base[0], a.chunks[0]), (0, 1), "a node without a word counts nothing");
            assert_eq!(a.base[1], made, "a call's waits start after the calls before it");
            let chunks = a.chunks[1];
            assert_eq!(chunks, rail_chunks(rows));
            let mut landed = 0u64; // rows [0, landed) have arrived
            for k in 0..chunks {
                let rows = u64::from(rows);
                let (begin, end) = (chunk_begin(rows, chunks, k), chunk_begin(rows, chunks, k + 1));
                assert_eq!(begin, landed, "{rows} rows: the chunks tile them");
                for offset in begin..end {
                    assert!(row_target(&a, 1, offset as u32) > made, "row {offset} before its chunk");
                }
                made += 5;
                landed = end;
                for offset in 0..landed {
                    assert!(row_target(&a, 1, offset as u32) <= made, "row {offset} after chunk {k}");
                }
            }
            assert_eq!(landed, u64::from(rows));
        }
        // The phases count apart.
        let source = Source { word: 8, ..Default::default() };
        let combine = signals.claim(RailPhase::Combine, &[Source::default(), source], 2, wait);
        assert_eq!(combine.base[1], 0);
    }
}

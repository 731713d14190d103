//! The host side of the GPU→CPU FIFO (layout and protocol: `weft_types::FifoCommand` and
//! `device/include/weft/fifo.cuh`).
//!
//! [`FifoReader`] is what a proxy thread runs: [`FifoReader::poll`] reads the command at the
//! tail with an acquire load of its second word and accepts it only if its valid bit is this
//! lap's parity; [`FifoReader::pop`] advances the tail with a release store, handing the slot
//! back to the writers. The reader is generic over [`FifoMemory`], so the same code reads a ring
//! in host-pinned memory mapped into a GPU ([`PinnedFifo`]) and a plain host-memory ring
//! ([`HostFifo`]) in tests. [`FifoWriter`] writes a [`HostFifo`] exactly as `fifo_push` does on
//! the device (take a slot from the head, wait bounded while the ring is full, a release fence,
//! then both words, each with the lap's valid bit), so host tests drive the proxy through the
//! real protocol.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_types::{FIFO_MAX_DEPTH, FIFO_TAIL_CACHE_STOPPED, FifoCommand, FifoStopCode};

use crate::sync::{AtomicU64, Ordering, fence, spin_hint};

/// A FIFO operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FifoError {
    /// The depth is not a power of two between 2 and `FIFO_MAX_DEPTH`.
    #[error("FIFO depth {depth} is not a power of two between 2 and {FIFO_MAX_DEPTH}")]
    BadDepth {
        /// The depth asked for.
        depth: usize,
    },
    /// The proxy stopped serving the FIFO (the stop word holds a `FifoStopCode`).
    #[error("the proxy serving this FIFO stopped (stop code {code}) while {op}")]
    Stopped {
        /// The stop word's value.
        code: u64,
        /// What the writer was doing.
        op: &'static str,
    },
    /// A bounded wait expired.
    #[error("FIFO {op} timed out after {waited:?} at position {position} (tail {tail})")]
    Timeout {
        /// What the writer was doing.
        op: &'static str,
        /// The position it waited on.
        position: u64,
        /// The tail it last saw.
        tail: u64,
        /// How long it waited.
        waited: Duration,
    },
    /// Allocating or mapping the FIFO's memory failed.
    #[error("FIFO memory: {0}")]
    Gpu(String),
}

/// Memory holding one FIFO: `depth` slots of two `u64` words, the tail and the stop word.
pub trait FifoMemory: Send + Sync {
    /// Slots in the ring (a power of two).
    fn depth(&self) -> usize;
    /// The two words (`fst`, `snd`) of slot `index` (`index < depth`).
    fn slot(&self, index: usize) -> [&AtomicU64; 2];
    /// The tail: positions below it are consumed.
    fn tail(&self) -> &AtomicU64;
    /// The stop word (a `FifoStopCode`).
    fn stop(&self) -> &AtomicU64;
}

fn log2_depth(depth: usize) -> Result<u32, FifoError> {
    if depth < 2 || depth > FIFO_MAX_DEPTH as usize || !depth.is_power_of_two() {
        return Err(FifoError::BadDepth { depth });
    }
    Ok(depth.trailing_zeros())
}

/// The consuming side of a FIFO. One reader per FIFO (it keeps the tail in a local copy).
#[derive(Debug)]
pub struct FifoReader<M> {
    memory: M,
    tail: u64,
    log2_depth: u32,
}

impl<M: FifoMemory> FifoReader<M> {
    /// A reader starting at the tail stored in `memory`.
    pub fn new(memory: M) -> Result<Self, FifoError> {
        let log2_depth = log2_depth(memory.depth())?;
        let tail = memory.tail().load(Ordering::Acquire);
        Ok(Self { memory, tail, log2_depth })
    }

    /// The command at the tail if its writer has published it (valid bits cleared in the
    /// result), else `None`. Does not consume it: call [`FifoReader::pop`] once it is handled.
    pub fn poll(&self) -> Option<FifoCommand> {
        self.published_at(self.tail)
    }

    /// The command at `position` (less than a lap ahead of the tail) if published.
    fn published_at(&self, position: u64) -> Option<FifoCommand> {
        let mask = (1u64 << self.log2_depth) - 1;
        // `position & mask` is below depth, a usize.
        let slot = self.memory.slot((position & mask) as usize);
        // The writer stores the two words in no particular order after a release fence: the
        // command is whole once both carry this lap's bit, and the acquire loads pair with the
        // fence, so the writes the command covers are visible too.
        let snd = slot[1].load(Ordering::Acquire);
        let fst = slot[0].load(Ordering::Acquire);
        let command = FifoCommand { fst, snd };
        command.is_current(position, self.log2_depth).then(|| command.without_valid_bits())
    }

    /// Consumes the command at the tail (after [`FifoReader::poll`] returned it): a release
    /// store of the new tail, so the writer that reuses the slot sees this reader's reads done.
    pub fn pop(&mut self) {
        self.tail += 1;
        self.memory.tail().store(self.tail, Ordering::Release);
    }

    /// Commands published from the tail on, up to the first slot not (yet) published: what is
    /// left to handle (a writer that took a slot but has not written it hides those behind it).
    pub fn published(&self) -> u64 {
        let depth = 1u64 << self.log2_depth;
        (0..depth).take_while(|&i| self.published_at(self.tail + i).is_some()).count() as u64
    }

    /// The position of the next command to poll.
    pub fn position(&self) -> u64 {
        self.tail
    }

    /// Slots in the ring.
    pub fn depth(&self) -> usize {
        1 << self.log2_depth
    }

    /// The memory read.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Stores `code` into the stop word (release): device waits on this FIFO give up.
    pub fn set_stop(&self, code: FifoStopCode) {
        self.memory.stop().store(code as u64, Ordering::Release);
    }
}

/// A FIFO in plain host memory (tests, and the CPU-only proxy path). Clones share the ring.
#[derive(Clone, Debug)]
pub struct HostFifo {
    inner: Arc<HostFifoInner>,
}

#[derive(Debug)]
struct HostFifoInner {
    slots: Box<[[AtomicU64; 2]]>,
    head: AtomicU64,
    tail: AtomicU64,
    tail_cache: AtomicU64,
    stop: AtomicU64,
}

impl HostFifo {
    /// A zeroed ring of `depth` slots.
    pub fn new(depth: usize) -> Result<Self, FifoError> {
        log2_depth(depth)?;
        let slots = (0..depth).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect();
        Ok(Self {
            inner: Arc::new(HostFifoInner {
                slots,
                head: AtomicU64::new(0),
                tail: AtomicU64::new(0),
                tail_cache: AtomicU64::new(0),
                stop: AtomicU64::new(0),
            }),
        })
    }

    /// Positions handed out to writers so far.
    pub fn head(&self) -> u64 {
        self.inner.head.load(Ordering::Relaxed)
    }
}

impl FifoMemory for HostFifo {
    fn depth(&self) -> usize {
        self.inner.slots.len()
    }
    fn slot(&self, index: usize) -> [&AtomicU64; 2] {
        let [fst, snd] = &self.inner.slots[index];
        [fst, snd]
    }
    fn tail(&self) -> &AtomicU64 {
        &self.inner.tail
    }
    fn stop(&self) -> &AtomicU64 {
        &self.inner.stop
    }
}

/// Writes a [`HostFifo`] exactly as the device's `fifo_push`/`fifo_poll`/`fifo_sync` do; any
/// number of clones may push concurrently.
#[derive(Clone, Debug)]
pub struct FifoWriter {
    fifo: HostFifo,
    log2_depth: u32,
    timeout: Option<Duration>,
}

impl FifoWriter {
    /// A writer whose waits give up after `timeout` (`None`: wait until the proxy stops).
    pub fn new(fifo: HostFifo, timeout: Option<Duration>) -> Self {
        // HostFifo::new checked the depth.
        let log2_depth = fifo.depth().trailing_zeros();
        Self { fifo, log2_depth, timeout }
    }

    fn stopped(&self, op: &'static str) -> Result<(), FifoError> {
        match self.fifo.inner.stop.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(FifoError::Stopped { code, op }),
        }
    }

    /// Pushes `cmd` (its valid bit is replaced) and returns its position. Waits while the ring
    /// is full, bounded by the timeout and the stop word. Like the device push, it reads the
    /// stop word only while waiting: a push into a stopped FIFO that finds a free slot before
    /// any writer saw the stop word is lost, and the next wait reports the stop.
    pub fn push(&self, cmd: FifoCommand) -> Result<u64, FifoError> {
        let inner = &self.fifo.inner;
        let depth = 1u64 << self.log2_depth;
        let pos = inner.head.fetch_add(1, Ordering::Relaxed);
        let cached = inner.tail_cache.load(Ordering::Acquire);
        // A set stop bit makes `cached` huge, so it is tested first.
        if cached & FIFO_TAIL_CACHE_STOPPED != 0 || pos >= depth + cached {
            self.wait_for_slot(pos)?;
        }
        let mask = depth - 1;
        // `pos & mask` is below depth, a usize.
        let slot = &inner.slots[(pos & mask) as usize];
        let cmd = cmd.for_position(pos, self.log2_depth);
        // As the device: a release fence, then both words with no order between them (here
        // `snd` first, so the reader's test of both valid bits is what makes it correct).
        fence(Ordering::Release);
        slot[1].store(cmd.snd, Ordering::Relaxed);
        slot[0].store(cmd.fst, Ordering::Relaxed);
        Ok(pos)
    }

    /// The device's wait for a free slot: only the writer next in line (`pos` = cached tail +
    /// depth) reads the tail and the stop word and publishes what it saw in the tail cache (the
    /// stop as `FIFO_TAIL_CACHE_STOPPED`); the others wait on the tail cache.
    fn wait_for_slot(&self, pos: u64) -> Result<(), FifoError> {
        const OP: &str = "waiting for a free slot";
        let inner = &self.fifo.inner;
        let depth = 1u64 << self.log2_depth;
        let start = Instant::now();
        let mut seen = 0;
        loop {
            let cached = inner.tail_cache.load(Ordering::Acquire);
            if cached & FIFO_TAIL_CACHE_STOPPED != 0 {
                return Err(FifoError::Stopped { code: inner.stop.load(Ordering::Acquire), op: OP });
            }
            if pos < cached + depth {
                return Ok(());
            }
            if pos == cached + depth {
                seen = inner.tail.load(Ordering::Acquire);
                if pos < seen + depth {
                    inner.tail_cache.fetch_max(seen, Ordering::Release);
                    return Ok(());
                }
                if let code @ 1.. = inner.stop.load(Ordering::Acquire) {
                    inner.tail_cache.fetch_or(FIFO_TAIL_CACHE_STOPPED, Ordering::Release);
                    return Err(FifoError::Stopped { code, op: OP });
                }
            }
            if self.timeout.is_some_and(|t| start.elapsed() > t) {
                return Err(FifoError::Timeout { op: "push", position: pos, tail: seen, waited: start.elapsed() });
            }
            spin_hint();
        }
    }

    /// True once the proxy consumed position `pos`.
    pub fn poll(&self, pos: u64) -> bool {
        self.fifo.inner.tail.load(Ordering::Acquire) > pos
    }

    /// Waits until the proxy consumed position `pos`, bounded by the timeout and the stop word.
    pub fn sync(&self, pos: u64) -> Result<(), FifoError> {
        let start = Instant::now();
        loop {
            if self.poll(pos) {
                return Ok(());
            }
            self.stopped("syncing")?;
            if let Some(t) = self.timeout
                && start.elapsed() > t
            {
                let tail = self.fifo.inner.tail.load(Ordering::Acquire);
                return Err(FifoError::Timeout { op: "sync", position: pos, tail, waited: start.elapsed() });
            }
            spin_hint();
        }
    }
}

/// A FIFO a GPU pushes into: the ring, tail and stop word in host-pinned memory mapped into the
/// device, head and tail cache in device memory (the CPU tests use [`HostFifo`] through the same
/// [`FifoReader`]).
#[cfg(not(all(test, weft_loom)))]
#[derive(Clone, Debug)]
pub struct PinnedFifo {
    inner: Arc<PinnedInner>,
}

/// Bytes between the words of a [`PinnedFifo`] that different agents write or poll, so that no
/// two share a cache line (x86 lines are 64 bytes, GPU L2 lines 128): a pusher's PCIe read of
/// the stop word must not snoop the line the proxy stores the tail to on every pop.
#[cfg(not(all(test, weft_loom)))]
const LINE: usize = 128;

#[cfg(not(all(test, weft_loom)))]
#[derive(Debug)]
struct PinnedInner {
    depth: usize,
    /// `depth` slots of 16 bytes, then the tail and the stop word, each on a line of its own
    /// ([`PinnedInner::tail_offset`], [`PinnedInner::stop_offset`]).
    host: weft_gpu::PinnedHostMemory,
    /// The head at offset 0 and the tail cache at offset [`LINE`].
    device: weft_gpu::DeviceMemory,
}

#[cfg(not(all(test, weft_loom)))]
impl PinnedInner {
    fn tail_offset(depth: usize) -> usize {
        (depth * 16).next_multiple_of(LINE)
    }
    fn stop_offset(depth: usize) -> usize {
        Self::tail_offset(depth) + LINE
    }
}

#[cfg(not(all(test, weft_loom)))]
impl PinnedFifo {
    /// Allocates a FIFO of `depth` slots for `device` (setup time: this makes CUDA calls).
    pub fn new(device: &weft_gpu::Device, depth: usize) -> Result<Self, FifoError> {
        log2_depth(depth)?;
        let gpu = |e: weft_gpu::GpuError| FifoError::Gpu(e.to_string());
        let host_len = PinnedInner::stop_offset(depth) + LINE;
        let host = weft_gpu::PinnedHostMemory::alloc(device, host_len).map_err(gpu)?;
        let dev = weft_gpu::DeviceMemory::alloc(device, 2 * LINE, weft_gpu::AllocKind::Legacy).map_err(gpu)?;
        dev.fill(0, 2 * LINE, 0).map_err(gpu)?;
        // Every word below the stop word is then in bounds (checked once here).
        host.atomic_u64(PinnedInner::stop_offset(depth)).map_err(gpu)?;
        Ok(Self { inner: Arc::new(PinnedInner { depth, host, device: dev }) })
    }

    /// The handle kernels push through; valid while `self` (or a clone) lives.
    pub fn device_handle(&self, wait: weft_types::WaitContext) -> weft_types::FifoDeviceHandle {
        let host = self.inner.host.device_ptr();
        let dev = self.inner.device.ptr();
        let depth = self.inner.depth;
        weft_types::FifoDeviceHandle {
            ring: host,
            head: dev,
            tail: host + PinnedInner::tail_offset(depth) as u64,
            tail_cache: dev + LINE as u64,
            stop: host + PinnedInner::stop_offset(depth) as u64,
            // FifoReader::new / PinnedFifo::new bound the depth by FIFO_MAX_DEPTH (a u32).
            depth: depth as u32,
            reserved: 0,
            wait,
        }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // `new` checked the last word; callers pass offsets of slots, the tail or the stop word.
        self.inner
            .host
            .atomic_u64(offset)
            .unwrap_or_else(|_| unreachable!("pinned FIFO word at {offset} lies inside the checked allocation"))
    }
}

#[cfg(not(all(test, weft_loom)))]
impl FifoMemory for PinnedFifo {
    fn depth(&self) -> usize {
        self.inner.depth
    }
    fn slot(&self, index: usize) -> [&AtomicU64; 2] {
        [self.word(16 * index), self.word(16 * index + 8)]
    }
    fn tail(&self) -> &AtomicU64 {
        self.word(PinnedInner::tail_offset(self.inner.depth))
    }
    fn stop(&self) -> &AtomicU64 {
        self.word(PinnedInner::stop_offset(self.inner.depth))
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use weft_types::{FifoCommandFields, FifoOp};

    fn cmd(i: u32) -> FifoCommand {
        FifoCommand::encode(FifoCommandFields {
            op: FifoOp::Put as u8,
            size: i,
            src_offset: i.wrapping_mul(7),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn depth_must_be_a_power_of_two() {
        for bad in [0, 1, 3, 6, (FIFO_MAX_DEPTH as usize) * 2] {
            assert_eq!(HostFifo::new(bad).unwrap_err(), FifoError::BadDepth { depth: bad });
        }
        assert!(HostFifo::new(2).is_ok());
    }

    #[test]
    fn commands_come_out_in_order_across_many_laps() {
        let fifo = HostFifo::new(4).unwrap();
        let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(5)));
        let mut reader = FifoReader::new(fifo).unwrap();
        assert!(reader.poll().is_none(), "zeroed memory reads empty");
        for i in 0..37 {
            let pos = writer.push(cmd(i)).unwrap();
            assert_eq!(pos, u64::from(i));
            let got = reader.poll().unwrap();
            assert_eq!(got, cmd(i));
            assert!(!writer.poll(pos));
            reader.pop();
            assert!(writer.poll(pos));
            assert!(reader.poll().is_none(), "stale slot of the previous lap must not look valid");
        }
    }

    #[test]
    fn published_counts_the_commands_left_from_the_tail() {
        let fifo = HostFifo::new(4).unwrap();
        let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(5)));
        let mut reader = FifoReader::new(fifo).unwrap();
        assert_eq!(reader.published(), 0);
        for i in 0..4 {
            writer.push(cmd(i)).unwrap();
        }
        assert_eq!(reader.published(), 4, "a full ring");
        reader.pop();
        reader.pop();
        assert_eq!(reader.published(), 2, "the popped slots hold the last lap's commands");
        writer.push(cmd(4)).unwrap();
        assert_eq!(reader.published(), 3, "across the wrap");
        for _ in 0..3 {
            reader.pop();
        }
        assert_eq!(reader.published(), 0);
    }

    #[test]
    fn a_full_ring_makes_push_wait_and_time_out() {
        let fifo = HostFifo::new(2).unwrap();
        let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_millis(50)));
        writer.push(cmd(0)).unwrap();
        writer.push(cmd(1)).unwrap();
        let err = writer.push(cmd(2)).unwrap_err();
        assert!(matches!(err, FifoError::Timeout { op: "push", position: 2, tail: 0, .. }), "{err}");
    }

    #[test]
    fn the_stop_word_releases_waiting_writers() {
        let fifo = HostFifo::new(2).unwrap();
        let writer = FifoWriter::new(fifo.clone(), None);
        let reader = FifoReader::new(fifo).unwrap();
        writer.push(cmd(0)).unwrap();
        writer.push(cmd(1)).unwrap();
        let w = writer.clone();
        let blocked = std::thread::spawn(move || w.push(cmd(2)));
        std::thread::sleep(Duration::from_millis(20));
        reader.set_stop(FifoStopCode::Shutdown);
        assert!(matches!(blocked.join().unwrap(), Err(FifoError::Stopped { code: 1, .. })));
        assert!(matches!(writer.sync(0), Err(FifoError::Stopped { code: 1, .. })));
    }

    #[test]
    fn concurrent_writers_and_one_reader_lose_and_duplicate_nothing() {
        let fifo = HostFifo::new(8).unwrap();
        let writer = FifoWriter::new(fifo.clone(), Some(Duration::from_secs(10)));
        let mut reader = FifoReader::new(fifo).unwrap();
        let writers: Vec<_> = (0..3u32)
            .map(|t| {
                let w = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        w.push(cmd(t * 1000 + i)).unwrap();
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < 1500 {
            assert!(Instant::now() < deadline, "reader stalled at {}", seen.len());
            if let Some(c) = reader.poll() {
                seen.push(c.fields().size);
                reader.pop();
            }
        }
        for w in writers {
            w.join().unwrap();
        }
        for t in 0..3u32 {
            let mine: Vec<u32> = seen.iter().copied().filter(|s| s / 1000 == t).collect();
            assert_eq!(mine, (0..500).map(|i| t * 1000 + i).collect::<Vec<_>>(), "writer {t} out of order");
        }
    }
}

/// Loom models of the FIFO host side: `RUSTFLAGS="--cfg weft_loom" cargo test -p weft-core
/// --lib --release loom`.
#[cfg(all(test, weft_loom))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod loom_tests {
    use super::*;
    use weft_types::{FifoCommandFields, FifoOp};

    fn cmd(i: u32) -> FifoCommand {
        FifoCommand::encode(FifoCommandFields { op: FifoOp::Put as u8, size: i, src_offset: !i, ..Default::default() })
            .unwrap()
    }

    /// One writer pushes three commands through a two-slot ring (so it wraps and waits on a full
    /// ring) while one reader consumes them: in every interleaving the reader sees each command
    /// whole, in order, exactly once, and never a stale slot.
    #[test]
    fn loom_fifo_push_pop_wraps_and_waits_on_a_full_ring() {
        loom::model(|| {
            let fifo = HostFifo::new(2).unwrap();
            let writer = FifoWriter::new(fifo.clone(), None);
            let producer = loom::thread::spawn(move || {
                for i in 0..3 {
                    assert_eq!(writer.push(cmd(i)).unwrap(), u64::from(i));
                }
            });
            let mut reader = FifoReader::new(fifo).unwrap();
            let mut next = 0;
            while next < 3 {
                match reader.poll() {
                    Some(c) => {
                        assert_eq!(c, cmd(next), "torn or stale command");
                        reader.pop();
                        next += 1;
                    }
                    None => loom::thread::yield_now(),
                }
            }
            producer.join().unwrap();
            assert!(reader.poll().is_none());
        });
    }

    /// `writers` writers race for the slots of a two-slot ring while the reader pops (with three,
    /// one waits for a slot the reader frees): each command arrives exactly once, nobody hangs.
    fn writers_share_a_two_slot_ring(writers: u32) {
        loom::model(move || {
            let fifo = HostFifo::new(2).unwrap();
            let handles: Vec<_> = (0..writers)
                .map(|t| {
                    let w = FifoWriter::new(fifo.clone(), None);
                    loom::thread::spawn(move || {
                        w.push(cmd(10 + t)).unwrap();
                    })
                })
                .collect();
            let mut reader = FifoReader::new(fifo).unwrap();
            let mut got = Vec::new();
            while got.len() < writers as usize {
                match reader.poll() {
                    Some(c) => {
                        got.push(c.fields().size);
                        reader.pop();
                    }
                    None => loom::thread::yield_now(),
                }
            }
            for h in handles {
                h.join().unwrap();
            }
            got.sort();
            assert_eq!(got, (0..writers).map(|t| 10 + t).collect::<Vec<_>>());
            assert!(reader.poll().is_none());
        });
    }

    #[test]
    fn loom_fifo_two_writers_share_the_ring() {
        writers_share_a_two_slot_ring(2);
    }

    #[test]
    fn loom_fifo_three_writers_wait_their_turn_on_a_two_slot_ring() {
        writers_share_a_two_slot_ring(3);
    }

    /// Two writers wait on a full two-slot ring (one reads the tail and the stop word, the other
    /// the tail cache) when the reader sets the stop word instead of popping: both give up.
    #[test]
    fn loom_fifo_writers_waiting_on_a_full_ring_all_see_the_stop() {
        loom::model(|| {
            let fifo = HostFifo::new(2).unwrap();
            let first = FifoWriter::new(fifo.clone(), None);
            first.push(cmd(0)).unwrap();
            first.push(cmd(1)).unwrap();
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let w = FifoWriter::new(fifo.clone(), None);
                    loom::thread::spawn(move || w.push(cmd(30 + t)))
                })
                .collect();
            FifoReader::new(fifo).unwrap().set_stop(FifoStopCode::Shutdown);
            for h in handles {
                let outcome = h.join().unwrap();
                assert!(matches!(outcome, Err(FifoError::Stopped { code: 1, .. })), "{outcome:?}");
            }
        });
    }
}

//! A copy engine simulated on host memory, for tests of the copy-engine transport without a GPU.
//!
//! [`HostAddressSpace`] places [`HostMemory`] buffers at made-up, far-apart addresses, so the
//! transport sees plain `u64` addresses as it does on a GPU. [`HostCopyQueue`] executes copies
//! and 8-byte stores between them in order on a thread of its own, optionally after a delay per
//! operation, so completion is genuinely asynchronous: a marker is reached only once the thread
//! has executed everything enqueued before it. [`HostCopyQueue::stall`] stops the thread (a copy
//! engine stuck behind something), to test timeouts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::ce::{CopyQueue, CopyQueueError};
use super::{HostMemory, Memory};

/// Distance between the made-up base addresses of two buffers.
const SPACING: u64 = 1 << 40;

/// Host buffers at made-up device-like addresses.
#[derive(Debug, Default)]
pub struct HostAddressSpace {
    buffers: Mutex<Vec<Arc<HostMemory>>>,
}

impl HostAddressSpace {
    /// An empty space.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds a zeroed buffer of `len` bytes; returns its base address and the buffer.
    pub fn alloc(&self, len: usize) -> (u64, Arc<HostMemory>) {
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let memory = Arc::new(HostMemory::new(len));
        buffers.push(memory.clone());
        (SPACING * buffers.len() as u64, memory)
    }

    fn locate(&self, addr: u64, len: u64) -> Result<(Arc<HostMemory>, usize), CopyQueueError> {
        let buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let index = usize::try_from(addr / SPACING).ok().and_then(|i| i.checked_sub(1));
        let offset = addr % SPACING;
        match index.and_then(|i| buffers.get(i)) {
            Some(m) if offset + len <= m.len() as u64 => Ok((m.clone(), offset as usize)),
            _ => Err(CopyQueueError::Unmapped { addr, len }),
        }
    }

    /// Copies `len` bytes from `src` to `dst`.
    pub fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), CopyQueueError> {
        let (from, at) = self.locate(src, len)?;
        let (to, to_at) = self.locate(dst, len)?;
        let mut bytes = vec![0u8; len as usize];
        from.read(at, &mut bytes)?;
        Ok(to.write(to_at, &bytes)?)
    }

    /// Stores `value` (little-endian) at `addr`.
    pub fn store_u64(&self, addr: u64, value: u64) -> Result<(), CopyQueueError> {
        let (to, at) = self.locate(addr, 8)?;
        Ok(to.write(at, &value.to_le_bytes())?)
    }

    /// Loads the `u64` at `addr`.
    pub fn load_u64(&self, addr: u64) -> Result<u64, CopyQueueError> {
        let (from, at) = self.locate(addr, 8)?;
        let mut bytes = [0u8; 8];
        from.read(at, &mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }
}

#[derive(Debug)]
enum Work {
    Copy { dst: u64, src: u64, len: u64 },
    Store { addr: u64, value: u64 },
}

#[derive(Debug, Default)]
struct Engine {
    executed: AtomicU64,
    stalled: AtomicBool,
    closing: AtomicBool,
    error: Mutex<Option<CopyQueueError>>,
}

/// An ordered queue of copies and stores on host memory, executed by a thread of its own.
#[derive(Debug)]
pub struct HostCopyQueue {
    tx: Mutex<Sender<Work>>,
    enqueued: AtomicU64,
    /// Markers placed so far (shared, so a test can read it after the queue moved into a
    /// transport).
    marks: Arc<AtomicU64>,
    engine: Arc<Engine>,
    thread: Option<JoinHandle<()>>,
}

impl HostCopyQueue {
    /// A queue over `space` whose thread waits `delay` before each operation.
    pub fn new(space: Arc<HostAddressSpace>, delay: Duration) -> Self {
        let (tx, rx) = channel();
        let engine = Arc::new(Engine::default());
        let e = engine.clone();
        let thread = std::thread::Builder::new()
            .name("weft-sim-copy-engine".into())
            .spawn(move || execute(&space, &e, &rx, delay))
            .ok();
        if thread.is_none() {
            *engine.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(CopyQueueError::EngineGone);
        }
        Self { tx: Mutex::new(tx), enqueued: AtomicU64::new(0), marks: Arc::default(), engine, thread }
    }

    /// Stops (`true`) or resumes the engine: a stopped engine executes nothing.
    pub fn stall(&self, stalled: bool) {
        self.engine.stalled.store(stalled, Ordering::Release);
    }

    /// The count of markers placed on this queue.
    pub fn mark_counter(&self) -> Arc<AtomicU64> {
        self.marks.clone()
    }

    /// Operations executed so far.
    pub fn executed(&self) -> u64 {
        self.engine.executed.load(Ordering::Acquire)
    }

    fn send(&self, work: Work) -> Result<(), CopyQueueError> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(work).map_err(|_| CopyQueueError::EngineGone)?;
        self.enqueued.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

fn execute(space: &HostAddressSpace, engine: &Engine, rx: &Receiver<Work>, delay: Duration) {
    while !engine.closing.load(Ordering::Acquire) {
        let work = match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(w) => w,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        while engine.stalled.load(Ordering::Acquire) {
            if engine.closing.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let done = match work {
            Work::Copy { dst, src, len } => space.copy(dst, src, len),
            Work::Store { addr, value } => space.store_u64(addr, value),
        };
        if let Err(e) = done {
            *engine.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            return;
        }
        engine.executed.fetch_add(1, Ordering::AcqRel);
    }
}

impl CopyQueue for HostCopyQueue {
    type Marker = u64;

    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), CopyQueueError> {
        self.send(Work::Copy { dst, src, len })
    }

    fn write_value(&self, addr: u64, value: u64) -> Result<(), CopyQueueError> {
        self.send(Work::Store { addr, value })
    }

    fn mark(&self) -> Result<u64, CopyQueueError> {
        self.marks.fetch_add(1, Ordering::Relaxed);
        Ok(self.enqueued.load(Ordering::Acquire))
    }

    fn reached(&self, marker: &u64) -> Result<bool, CopyQueueError> {
        if let Some(e) = self.engine.error.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(e);
        }
        Ok(self.engine.executed.load(Ordering::Acquire) >= *marker)
    }
}

impl Drop for HostCopyQueue {
    fn drop(&mut self) {
        self.engine.closing.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

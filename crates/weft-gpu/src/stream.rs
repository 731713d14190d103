//! Streams, events and CUDA graphs.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::cu;
use crate::error::GpuError;
use crate::memory::DeviceMemory;

/// How long a dropped stream waits for the work that uses its retained allocations.
const DROP_WAIT: Duration = Duration::from_secs(120);

/// How long [`Stream::wait_idle`] polls back to back before it naps.
pub(crate) const WAIT_IDLE_SPIN: Duration = Duration::from_micros(100);
/// How long [`Stream::wait_idle_spinning`] polls without napping: ten times an EP call's longest
/// hop at DeepEP's shape (about 2 ms on an H200).
pub(crate) const WAIT_IDLE_BUSY: Duration = Duration::from_millis(20);

/// A non-blocking stream (it never synchronises with the legacy default stream).
pub struct Stream {
    device: Device,
    raw: sys::CUstream,
    /// Boxed, so that a stream stays three words: many structures embed one.
    state: Box<StreamState>,
}

/// What a [`Stream`] keeps besides its handle.
#[derive(Default)]
struct StreamState {
    /// Whether drop destroys the handle (false for streams borrowed from an application).
    owned: bool,
    /// Allocations the queued work may use, kept alive until the stream is seen idle (see
    /// `buffer.rs`).
    retained: Retained,
}

// SAFETY: a CUstream may be used from any thread once its context is current; we bind first.
unsafe impl Send for Stream {}
// SAFETY: all methods take &self and hand the handle to the driver, which is thread-safe.
unsafe impl Sync for Stream {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream").field("device", &self.device.ordinal()).finish()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The retained allocations go with the stream: their work must have run first. Work
        // that never ends (a kernel waiting on a peer that died) leaves them allocated.
        if !self.state.retained.is_empty() && self.wait_idle(DROP_WAIT, "a dropped stream's work").is_err() {
            let stuck = std::mem::take(&mut *self.state.retained.lock());
            tracing::warn!("a stream dropped with work still running after {DROP_WAIT:?}: its buffers stay allocated");
            std::mem::forget(stuck);
        }
        if self.state.owned && self.device.bind().is_ok() {
            // SAFETY: the stream was created by us and is not used after this.
            let _ = unsafe { cu!(cuStreamDestroy_v2(self.raw)) };
        }
    }
}

impl Stream {
    /// Creates a non-blocking stream on `device`.
    pub fn new(device: &Device) -> Result<Self, GpuError> {
        device.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { cu!(cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))? };
        Ok(Self::owned(device, raw))
    }

    /// Creates a non-blocking stream on `device` with the device's greatest priority: when SMs
    /// free up, its blocks are scheduled before those of streams of lower priority.
    pub fn with_greatest_priority(device: &Device) -> Result<Self, GpuError> {
        device.bind()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: two out-pointers to locals.
        unsafe { cu!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest))? };
        let mut raw: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: out-pointer to a local.
        unsafe { cu!(cuStreamCreateWithPriority(&mut raw, flags, greatest))? };
        Ok(Self::owned(device, raw))
    }

    /// A stream this value owns (destroyed on drop).
    fn owned(device: &Device, raw: sys::CUstream) -> Self {
        Self { device: device.clone(), raw, state: Box::new(StreamState { owned: true, ..StreamState::default() }) }
    }

    /// Wraps a stream the application created (a `cudaStream_t` is a `CUstream`; null is the
    /// legacy default stream). The handle is not destroyed on drop.
    ///
    /// # Safety
    /// `raw` must be null or a live stream of `device`'s primary context, and stay live for as
    /// long as the returned value (and any work it enqueues) is in use.
    pub unsafe fn borrowed(device: &Device, raw: sys::CUstream) -> Self {
        Self { device: device.clone(), raw, state: Box::default() }
    }

    /// The legacy default stream of `device`'s primary context (the one synchronous copies and
    /// memsets use; it synchronises with every blocking stream). Not destroyed on drop.
    pub fn legacy_default(device: &Device) -> Self {
        // SAFETY: null names the legacy default stream, which exists for as long as the
        // context does, and `device` keeps its primary context retained.
        unsafe { Self::borrowed(device, std::ptr::null_mut()) }
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Raw handle for launches.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Waits until all work on the stream is done, or `timeout` passes: then an error says what
    /// was being waited for. Polls without blocking the thread inside the driver: back to back
    /// for the first 100 µs (a small copy is done in a few µs, and a nap would
    /// add tens), then with naps doubling from 20 µs to 1 ms.
    pub fn wait_idle(&self, timeout: Duration, what: &str) -> Result<(), GpuError> {
        self.poll_idle(timeout, what, WAIT_IDLE_SPIN)
    }

    /// [`Stream::wait_idle`] polling back to back (yielding the CPU between queries) for the
    /// first 20 ms, then with its naps: for a wait on a call's critical path that
    /// lasts a few milliseconds, where the naps' overshoot (up to one nap past the work's end,
    /// and a sleep's timer slack) would be the call's cost. A longer wait (a stall that ends in
    /// the kernels' timeout) does not keep a core busy.
    pub fn wait_idle_spinning(&self, timeout: Duration, what: &str) -> Result<(), GpuError> {
        self.poll_idle(timeout, what, WAIT_IDLE_BUSY)
    }

    /// Polls the stream until idle or `timeout`: back to back for `spin`, then with naps.
    fn poll_idle(&self, timeout: Duration, what: &str, spin: Duration) -> Result<(), GpuError> {
        self.device.bind()?;
        let start = Instant::now();
        let mut nap = Duration::from_micros(20);
        loop {
            // SAFETY: queries a live stream.
            let status = unsafe { sys::cuStreamQuery(self.raw) };
            match status {
                sys::CUresult::CUDA_SUCCESS => {
                    self.release_retained();
                    return Ok(());
                }
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                other => return crate::driver::check("cuStreamQuery", other),
            }
            let elapsed = start.elapsed();
            if elapsed > timeout {
                return Err(GpuError::StreamTimeout {
                    ordinal: self.device.ordinal(),
                    waited_ms: elapsed.as_millis(),
                    what: what.to_string(),
                });
            }
            if elapsed < WAIT_IDLE_SPIN {
                std::hint::spin_loop();
            } else if elapsed < spin {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }

    /// Keeps `memory` alive until this stream is next seen idle: called by whoever enqueued
    /// work that uses it, after enqueuing.
    pub fn retain(&self, memory: &Arc<DeviceMemory>) {
        self.state.retained.add(std::slice::from_ref(memory));
    }

    /// Drops the retained allocations if the stream is still idle. Checked again under the
    /// lock: a thread that enqueues work and then retains its memory either retains after
    /// this clears (and its reference stays) or enqueued before the query (and the stream is
    /// not idle).
    fn release_retained(&self) {
        let mut held = self.state.retained.lock();
        // SAFETY: queries a live stream.
        if !held.is_empty() && unsafe { sys::cuStreamQuery(self.raw) } == sys::CUresult::CUDA_SUCCESS {
            held.clear();
        }
    }

    /// Enqueues a device-to-device copy of `len` bytes (either address may be a peer mapping
    /// or an imported allocation; unified addressing finds the owners). Returns once it is
    /// queued: it never waits for the stream, so a proxy thread may call it while kernels run.
    ///
    /// # Safety
    /// `[src, src + len)` and `[dst, dst + len)` must be device memory accessible from this
    /// stream's device and stay allocated until the copy has executed.
    pub unsafe fn copy_async(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        // SAFETY: the caller guarantees both ranges; the stream is live.
        unsafe { cu!(cuMemcpyDtoDAsync_v2(dst, src, len, self.raw)) }
    }

    /// Makes the work enqueued on this stream from now on wait for the work `event` was last
    /// recorded after (`cuStreamWaitEvent`); never waits on the host.
    pub fn wait_event(&self, event: &Event) -> Result<(), GpuError> {
        self.device.bind()?;
        // SAFETY: live stream and event.
        unsafe { cu!(cuStreamWaitEvent(self.raw, event.raw, 0)) }
    }

    /// Enqueues a 64-bit store of `value` to `addr`, ordered after every earlier operation of
    /// the stream, with a memory barrier first (the default flags): whoever observes the value
    /// also observes the writes of the copies queued before it. Never waits for the stream.
    ///
    /// # Safety
    /// `addr` must be an 8-byte aligned device address (local, peer-mapped or imported) valid
    /// until the write has executed.
    pub unsafe fn write_value64(&self, addr: u64, value: u64) -> Result<(), GpuError> {
        // SAFETY: the caller guarantees the address; the stream is live.
        unsafe {
            cu!(cuStreamWriteValue64_v2(
                self.raw,
                addr,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32
            ))
        }
    }

    /// Starts capturing this stream's work into a graph (thread-local capture mode).
    pub fn begin_capture(&self) -> Result<(), GpuError> {
        self.device.bind()?;
        // SAFETY: live stream; thread-local mode only affects this thread's unsafe calls.
        unsafe { cu!(cuStreamBeginCapture_v2(self.raw, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) }
    }

    /// Whether work enqueued on this stream is being captured into a graph (by us or by the
    /// application) rather than run.
    pub fn is_capturing(&self) -> Result<bool, GpuError> {
        self.device.bind()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: live stream; out-pointer to a local.
        unsafe { cu!(cuStreamIsCapturing(self.raw, &mut status))? };
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Ends the capture started by [`Stream::begin_capture`] and instantiates the graph.
    pub fn end_capture(&self) -> Result<Graph, GpuError> {
        self.device.bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: out-pointers to locals; the graph is destroyed by Graph::drop.
        unsafe {
            cu!(cuStreamEndCapture(self.raw, &mut graph))?;
            if let Err(e) = cu!(cuGraphInstantiateWithFlags(&mut exec, graph, 0)) {
                let _ = cu!(cuGraphDestroy(graph));
                return Err(e);
            }
        }
        // The captured work uses what the stream retained meanwhile (and perhaps before): the
        // graph keeps all of it for its replays.
        let retained = self.state.retained.lock().clone();
        Ok(Graph { device: self.device.clone(), graph, exec, retained })
    }
}

/// While alive, this thread's stream-capture mode is relaxed, so set-up calls the driver
/// counts as unsafe during a capture (mapping and exporting memory) may run while a stream of
/// this thread captures; the previous mode comes back on drop. The calls made under it must
/// not touch the capturing stream.
#[derive(Debug)]
pub struct CaptureModeRelaxed {
    previous: sys::CUstreamCaptureMode,
}

impl CaptureModeRelaxed {
    /// Relaxes this thread's capture mode.
    pub fn new() -> Result<Self, GpuError> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges a per-thread setting through a local.
        unsafe { cu!(cuThreadExchangeStreamCaptureMode(&mut mode))? };
        Ok(Self { previous: mode })
    }
}

impl Drop for CaptureModeRelaxed {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `new`; restores the mode this thread had.
        let _ = unsafe { cu!(cuThreadExchangeStreamCaptureMode(&mut mode)) };
    }
}

/// An instantiated CUDA graph.
pub struct Graph {
    device: Device,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The allocations the captured work uses, handed to every stream a replay runs on.
    retained: Vec<Arc<DeviceMemory>>,
}

// SAFETY: graph handles are plain driver handles usable from any thread with the context bound.
unsafe impl Send for Graph {}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph").field("device", &self.device.ordinal()).finish()
    }
}

impl Graph {
    /// Launches (replays) the graph on `stream`.
    pub fn launch(&self, stream: &Stream) -> Result<(), GpuError> {
        self.device.bind()?;
        // SAFETY: live graph and stream of the same context.
        unsafe { cu!(cuGraphLaunch(self.exec, stream.raw))? };
        stream.state.retained.add(&self.retained);
        Ok(())
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: handles created by end_capture, not used afterwards.
            unsafe {
                let _ = cu!(cuGraphExecDestroy(self.exec));
                let _ = cu!(cuGraphDestroy(self.graph));
            }
        }
    }
}

/// A CUDA event with timing enabled.
pub struct Event {
    device: Device,
    raw: sys::CUevent,
}

// SAFETY: event handles are usable from any thread with the context bound.
unsafe impl Send for Event {}
// SAFETY: methods take &self and only pass the handle to the driver.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("device", &self.device.ordinal()).finish()
    }
}

impl Event {
    /// Creates a timing event.
    pub fn new(device: &Device) -> Result<Self, GpuError> {
        device.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { cu!(cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))? };
        Ok(Self { device: device.clone(), raw })
    }

    /// Creates an event without timing, cheaper to record and query: a completion marker.
    pub fn marker(device: &Device) -> Result<Self, GpuError> {
        device.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { cu!(cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32))? };
        Ok(Self { device: device.clone(), raw })
    }

    /// Whether the work recorded before the event has completed (`cuEventQuery`: never waits).
    /// The calling thread must have the event's context current (see [`Device::bind`]).
    pub fn query(&self) -> Result<bool, GpuError> {
        // SAFETY: queries a live event.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => crate::driver::check("cuEventQuery", other).map(|()| false),
        }
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), GpuError> {
        self.device.bind()?;
        // SAFETY: live event and stream.
        unsafe { cu!(cuEventRecord(self.raw, stream.raw)) }
    }

    /// Milliseconds between `self` and a later `end` (both must have completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, GpuError> {
        let mut ms = 0f32;
        // SAFETY: writes one float for two live events.
        unsafe { cu!(cuEventElapsedTime_v2(&mut ms, self.raw, end.raw))? };
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: created by us, not used afterwards.
            let _ = unsafe { cu!(cuEventDestroy_v2(self.raw)) };
        }
    }
}

/// A stream's retained allocations, each once.
struct Retained<T = DeviceMemory>(Mutex<Vec<Arc<T>>>);

impl<T> Default for Retained<T> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<T> Retained<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<T>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Adds the allocations not held yet (a handful per stream: a linear scan is cheapest).
    fn add(&self, memories: &[Arc<T>]) {
        let mut held = self.lock();
        for memory in memories {
            if !held.iter().any(|h| Arc::ptr_eq(h, memory)) {
                held.push(Arc::clone(memory));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_allocation_is_retained_once_until_released() {
        let (a, b) = (Arc::new(1u8), Arc::new(2u8));
        let retained = Retained::default();
        retained.add(&[Arc::clone(&a), Arc::clone(&b), Arc::clone(&a)]);
        retained.add(std::slice::from_ref(&b));
        assert_eq!(retained.lock().len(), 2);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (2, 2));
        retained.lock().clear();
        assert!(retained.is_empty());
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 1));
    }
}

//! [`CopyQueue`] on a CUDA stream: the copy-engine transport's queue on a GPU.
//!
//! One dedicated non-blocking stream per peer, which every connection to that peer shares
//! ([`CudaCopyQueue::sharing`]): it never synchronises with the legacy default stream, where a
//! careless `cudaMemcpy` elsewhere in the process would otherwise put the proxy's copies behind
//! running kernels. Not one per connection: CUDA multiplexes streams onto a few hardware queues
//! (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 unless set, at most 32) and starts the work of one queue in
//! order, so with dozens of copy streams some copy lands behind a kernel launch enqueued after
//! the running one, which cannot start before the running kernel ends, which spins on the copy:
//! a stall until the copy times out (seen with ranks sharing one H200; `weft selftest --only
//! port` has the case: 40 channels, 20 launches back to back, failing with 8 and 32 queues). A
//! connection's order is the stream's, so sharing keeps it; connections to one peer then wait
//! for each other's earlier copies, which one copy engine moves at full speed anyway.
//!
//! Copies are `cuMemcpyDtoDAsync`, signals `cuStreamWriteValue64` (with its default memory
//! barrier, so the stored token is visible only after the copies before it), markers are
//! timing-free events polled with `cuEventQuery`.
//! Nothing here calls `cuStreamSynchronize`, `cuCtxSynchronize` or a synchronous copy: every
//! call returns once the work is queued, whatever the device is running.

use std::sync::{Arc, Mutex};

use weft_gpu::{Device, Event, GpuError, Stream};

use super::ce::{CopyQueue, CopyQueueError};

/// A CUDA stream as a [`CopyQueue`].
#[derive(Debug)]
pub struct CudaCopyQueue {
    device: Device,
    stream: Arc<Stream>,
    spare: Mutex<Vec<Event>>,
}

impl CudaCopyQueue {
    /// A queue on a new non-blocking stream of `device` (setup time: this makes CUDA calls that
    /// may synchronise).
    pub fn new(device: &Device) -> Result<Self, GpuError> {
        Ok(Self { device: device.clone(), stream: Arc::new(Stream::new(device)?), spare: Mutex::new(Vec::new()) })
    }

    /// Another queue on this queue's stream (a connection to the same peer): the work of both
    /// runs in the order it was enqueued, and a marker of either is reached after both's earlier
    /// work.
    pub fn sharing(&self) -> Self {
        Self { device: self.device.clone(), stream: Arc::clone(&self.stream), spare: Mutex::new(Vec::new()) }
    }

    /// The stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

/// A failed CUDA call of `op` as a queue error.
fn cuda(op: &'static str) -> impl FnOnce(GpuError) -> CopyQueueError {
    move |e| CopyQueueError::Cuda { op, detail: e.to_string() }
}

impl CopyQueue for CudaCopyQueue {
    type Marker = Event;

    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), CopyQueueError> {
        let len = usize::try_from(len).map_err(|_| CopyQueueError::TooLong { len })?;
        self.device.bind().map_err(cuda("binding the device"))?;
        // SAFETY: the transport checked both ranges against registered memories (local ones, and
        // the peer's as mapped here), which it keeps alive for as long as it exists; the owner of
        // the transport waits for the stream before dropping it.
        unsafe { self.stream.copy_async(dst, src, len) }.map_err(cuda("cuMemcpyDtoDAsync"))
    }

    fn write_value(&self, addr: u64, value: u64) -> Result<(), CopyQueueError> {
        self.device.bind().map_err(cuda("binding the device"))?;
        // SAFETY: the transport checked the token address is 8-byte aligned; it is the peer's
        // token slot, mapped here and kept alive by the transport.
        unsafe { self.stream.write_value64(addr, value) }.map_err(cuda("cuStreamWriteValue64"))
    }

    fn mark(&self) -> Result<Event, CopyQueueError> {
        self.device.bind().map_err(cuda("binding the device"))?;
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let event = match spare {
            Some(e) => e,
            None => Event::marker(&self.device).map_err(cuda("creating an event"))?,
        };
        event.record(&self.stream).map_err(cuda("cuEventRecord"))?;
        Ok(event)
    }

    fn reached(&self, marker: &Event) -> Result<bool, CopyQueueError> {
        self.device.bind().map_err(cuda("binding the device"))?;
        marker.query().map_err(cuda("cuEventQuery"))
    }

    fn recycle(&self, marker: Event) {
        self.spare.lock().unwrap_or_else(|p| p.into_inner()).push(marker);
    }
}

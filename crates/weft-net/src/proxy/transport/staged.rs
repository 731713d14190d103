//! Device memory behind the transports that move bytes through the host (TCP): a
//! [`StagedDeviceMemory`] is a [`Memory`] whose reads and writes go through a pinned host buffer,
//! and a [`DeviceInbox`] is an [`Inbox`] that writes into such memories and keeps each
//! connection's inbound token in device memory, where a kernel's `port_wait` spins on it.
//!
//! **Never behind a kernel.** Every copy is queued on a non-blocking stream of the memory's (or
//! the inbox's) own and awaited by polling (`Stream::wait_idle`, bounded by the timeout), never
//! by a synchronous copy or `cuStreamSynchronize`: a synchronous copy runs on the legacy default
//! stream, which waits for every kernel of the blocking streams, among them the kernel that is
//! waiting for this very data. The callers are the transport's sender and receiver threads, not
//! the proxy threads, so these bounded waits never hold up the FIFO.
//!
//! **Order.** A write returns once its bytes are in device memory, and a signal is a
//! `cuStreamWriteValue64` of the token queued after that (with its memory barrier), so a kernel
//! that sees the new token value sees the data the signal covers.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use weft_gpu::{Device, DevicePtr, GpuError, PinnedHostMemory, Stream};

use super::{ConnectionId, Inbox, MAX_CONNECTIONS, Memory, MemoryError, MemoryTable};

/// Bytes of a staging buffer unless the caller asks for another size.
pub const DEFAULT_STAGING_BYTES: usize = 4 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Holders only queue copies and wait for them; the state stays consistent after a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn device_error(what: &str) -> impl Fn(GpuError) -> MemoryError + '_ {
    move |e| MemoryError::Device { detail: format!("{what}: {e}") }
}

/// What keeps a device allocation alive while a transport may copy to or from it.
pub type Owner = Arc<dyn Any + Send + Sync>;

struct Staging {
    stream: Stream,
    buffer: PinnedHostMemory,
}

/// A range of device memory that transports read and write through a pinned host buffer.
pub struct StagedDeviceMemory {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    timeout: Duration,
    staging: Mutex<Staging>,
    _owner: Owner,
}

impl fmt::Debug for StagedDeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedDeviceMemory").field("device", &self.device.ordinal()).field("len", &self.len).finish()
    }
}

impl StagedDeviceMemory {
    /// `[ptr, ptr + len)` of `device` (one allocation, kept alive by `owner`), copied through a
    /// pinned buffer of `staging_bytes`; every copy is bounded by `timeout`. Setup time: this
    /// allocates pinned memory and a stream.
    pub fn new(
        device: &Device,
        ptr: DevicePtr,
        len: usize,
        owner: Owner,
        staging_bytes: usize,
        timeout: Duration,
    ) -> Result<Self, GpuError> {
        weft_gpu::check_device_range(device, ptr, len)?;
        let staging = Staging {
            stream: Stream::new(device)?,
            buffer: PinnedHostMemory::alloc(device, staging_bytes.clamp(1, len.max(1)))?,
        };
        Ok(Self { device: device.clone(), ptr, len, timeout, staging: Mutex::new(staging), _owner: owner })
    }

    /// Copies `len` bytes at `offset` in pieces of the staging buffer's size, to the device
    /// when `to_device`, else from it. `host(buffer, at, n)` moves bytes `[at, at + n)` of the
    /// caller's slice between it and the staging buffer: before a piece's copy when writing
    /// the device, after it when reading.
    fn pieces(
        &self,
        offset: usize,
        len: usize,
        to_device: bool,
        mut host: impl FnMut(&PinnedHostMemory, usize, usize) -> Result<(), GpuError>,
    ) -> Result<(), MemoryError> {
        let what = if to_device { "a staged write into device memory" } else { "a staged read of device memory" };
        let failed = device_error(what);
        let staging = lock(&self.staging);
        let piece = staging.buffer.len();
        self.device.bind().map_err(&failed)?;
        let mut done = 0;
        while done < len {
            let n = piece.min(len - done);
            let device_at = self.ptr + (offset + done) as u64;
            let buffer = staging.buffer.device_ptr();
            if to_device {
                host(&staging.buffer, done, n).map_err(&failed)?;
            }
            let (dst, src) = if to_device { (device_at, buffer) } else { (buffer, device_at) };
            // SAFETY: the memory table checked `[offset, offset + len)` against this memory's
            // length, which `new` checked lies in one live allocation (kept by `_owner`); the
            // buffer holds `piece >= n` bytes; both outlive the copy, awaited right below.
            unsafe { staging.stream.copy_async(dst, src, n) }.map_err(&failed)?;
            staging.stream.wait_idle(self.timeout, what).map_err(&failed)?;
            if !to_device {
                host(&staging.buffer, done, n).map_err(&failed)?;
            }
            done += n;
        }
        Ok(())
    }
}

impl Memory for StagedDeviceMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemoryError> {
        let len = out.len();
        self.pieces(offset, len, false, |buffer, at, n| buffer.read_bytes(0, &mut out[at..at + n]))
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), MemoryError> {
        self.pieces(offset, data.len(), true, |buffer, at, n| buffer.write_bytes(0, &data[at..at + n]))
    }
}

/// A connection's inbound token: where its signals are stored, and how many arrived.
struct Token {
    addr: DevicePtr,
    count: u64,
    _owner: Owner,
}

/// An [`Inbox`] on a GPU: writes go into the memories of its table (staged device memory, or
/// host memory), signals into device-memory tokens registered per connection.
pub struct DeviceInbox {
    device: Device,
    memories: MemoryTable,
    /// Token stores, queued in signal order.
    stream: Stream,
    tokens: Mutex<Vec<Option<Token>>>,
    /// Flush GPUDirect RDMA writes before each token store (a NIC wrote the data).
    flush_rdma_writes: bool,
}

impl fmt::Debug for DeviceInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceInbox").field("device", &self.device.ordinal()).finish()
    }
}

impl DeviceInbox {
    /// An inbox of `device` applying writes into `memories`.
    pub fn new(device: &Device, memories: MemoryTable) -> Result<Self, GpuError> {
        Ok(Self {
            device: device.clone(),
            memories,
            stream: Stream::new(device)?,
            tokens: Mutex::new((0..MAX_CONNECTIONS).map(|_| None).collect()),
            flush_rdma_writes: false,
        })
    }

    /// This inbox, flushing GPUDirect RDMA writes before every token store: for a NIC that
    /// writes device memory itself, whose writes the token must not overtake.
    pub fn flushing_rdma_writes(mut self) -> Self {
        self.flush_rdma_writes = true;
        self
    }

    /// Signals of `connection` store the number of signals received so far into the device
    /// word at `token` (8-byte aligned, in memory of this inbox's GPU kept alive by `owner`).
    pub fn set_token(&self, connection: ConnectionId, token: DevicePtr, owner: Owner) -> Result<(), MemoryError> {
        let invalid = |detail: String| MemoryError::Device { detail };
        if !token.is_multiple_of(8) {
            return Err(invalid(format!("token address {token:#x} of connection {connection} is not 8-byte aligned")));
        }
        weft_gpu::check_device_range(&self.device, token, 8)
            .map_err(|e| invalid(format!("token of connection {connection}: {e}")))?;
        let mut tokens = lock(&self.tokens);
        let slot = tokens
            .get_mut(usize::from(connection))
            .ok_or_else(|| invalid(format!("connection {connection} is beyond {MAX_CONNECTIONS}")))?;
        *slot = Some(Token { addr: token, count: 0, _owner: owner });
        Ok(())
    }

    /// The memory table.
    pub fn memories(&self) -> &MemoryTable {
        &self.memories
    }

    /// Waits (bounded) until every token store queued so far has executed: before the tokens'
    /// memory may be freed.
    pub fn drain(&self, timeout: Duration) -> Result<(), MemoryError> {
        self.stream.wait_idle(timeout, "the token stores of a device inbox").map_err(device_error("draining"))
    }
}

impl Inbox for DeviceInbox {
    fn write(&self, memory: u8, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let (m, start) = self.memories.checked(memory, offset, data.len() as u64)?;
        m.write(start, data)
    }

    fn signal(&self, connection: ConnectionId) -> Result<(), MemoryError> {
        let mut tokens = lock(&self.tokens);
        let token = tokens.get_mut(usize::from(connection)).and_then(Option::as_mut).ok_or_else(|| {
            MemoryError::Device { detail: format!("a signal for connection {connection}, which has no token") }
        })?;
        let failed = device_error("a token store");
        self.device.bind().map_err(&failed)?;
        if self.flush_rdma_writes {
            self.device.flush_rdma_writes().map_err(device_error("a GPUDirect RDMA flush"))?;
        }
        token.count += 1;
        // SAFETY: `set_token` checked the address is an aligned word of a live allocation of
        // this GPU, kept alive by the token's owner for as long as the inbox exists.
        unsafe { self.stream.write_value64(token.addr, token.count) }.map_err(&failed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn errors_name_what_failed() {
        let e = device_error("a staged read of device memory")(GpuError::InvalidArgument("boom".into()));
        assert_eq!(e.to_string(), "device memory: a staged read of device memory: invalid argument: boom");
    }
}

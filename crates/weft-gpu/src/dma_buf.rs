//! Device memory exported as a Linux dma-buf (`cuMemGetHandleForAddressRange`): how an RDMA
//! NIC registers GPU memory without the GPU driver's peer-memory module
//! (`ibv_reg_dmabuf_mr`).

use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{DevicePtr, cu};
use crate::error::GpuError;

/// The granularity a dma-buf range must keep: the host page.
const PAGE: u64 = 4096;

/// A dma-buf of device memory: its descriptor, and where the memory asked for starts in it.
#[derive(Debug)]
pub struct DmaBuf {
    /// The dma-buf's file descriptor (closed on drop).
    pub fd: OwnedFd,
    /// Offset of the requested address from the buffer's first byte.
    pub offset: u64,
    /// Bytes the buffer covers (whole pages, at least the requested range).
    pub len: u64,
}

/// Exports the pages of device memory covering `[ptr, ptr + len)` of `device` as a dma-buf.
/// The pages must lie within one allocation (`cuMemAlloc` or `cuMemCreate`, mapped).
pub fn export_dma_buf(device: &Device, ptr: DevicePtr, len: usize) -> Result<DmaBuf, GpuError> {
    let unsupported = |what| GpuError::Unsupported { ordinal: device.ordinal(), what };
    if !device.rdma_registration()?.1 {
        return Err(unsupported("dma-buf export of device memory"));
    }
    device.bind()?;
    let (mut base, mut size) = (0, 0usize);
    // SAFETY: out-pointers to locals; the driver checks that `ptr` is device memory.
    unsafe { cu!(cuMemGetAddressRange_v2(&mut base, &mut size, ptr))? };
    let start = ptr - ptr % PAGE;
    let end = (ptr + len as u64).next_multiple_of(PAGE);
    if start < base || end > base + size as u64 {
        return Err(unsupported("dma-buf export of memory whose pages reach outside its allocation"));
    }
    let mut fd: i32 = -1;
    // SAFETY: a page-aligned range inside one live allocation of this device; the handle is an
    // int file descriptor written into `fd`.
    unsafe {
        cu!(cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast(),
            start,
            (end - start) as usize,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0
        ))?
    };
    if fd < 0 {
        return Err(GpuError::InvalidArgument(format!("cuMemGetHandleForAddressRange returned descriptor {fd}")));
    }
    // SAFETY: the driver created this descriptor for us; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(DmaBuf { fd, offset: ptr - start, len: end - start })
}

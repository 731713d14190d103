//! Allocations weft did not make (the buffers applications hand to collectives): which
//! allocation holds an address, whether another process can map it, and how.

use std::ffi::c_void;
use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{DevicePtr, cu};
use crate::error::GpuError;
use crate::memory::{LegacyIpcHandle, access_desc, allocation_range};

/// The identity of one allocation: its address range and the driver's buffer id, which is
/// unique over the process's life, so an address freed and allocated again is a new key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocationKey {
    /// First byte of the allocation.
    pub base: DevicePtr,
    /// Bytes in the allocation.
    pub size: u64,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
    pub buffer_id: u64,
}

impl AllocationKey {
    /// Whether `[ptr, ptr + len)` lies inside the allocation.
    pub fn contains(&self, ptr: DevicePtr, len: u64) -> bool {
        ptr >= self.base && ptr.checked_add(len).is_some_and(|end| end <= self.base + self.size)
    }
}

/// How another process can map an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// A `cuMemAlloc` allocation: through its legacy IPC handle.
    LegacyIpc,
    /// A VMM allocation created shareable as a POSIX file descriptor.
    PosixFd,
    /// Neither (e.g. stream-ordered pool memory, or VMM memory without an fd handle type).
    None,
}

/// An application's device allocation as the driver describes it. Holds no reference: the
/// application keeps the memory alive while weft uses it.
#[derive(Clone, Debug)]
pub struct UserAllocation {
    device: Device,
    key: AllocationKey,
    sharing: Sharing,
}

/// Reads one pointer attribute of `ptr` into a `T`.
///
/// # Safety
/// `T` must be the type the driver writes for `attribute`.
unsafe fn attribute<T: Default>(ptr: DevicePtr, attribute: sys::CUpointer_attribute) -> Result<T, GpuError> {
    let mut value = T::default();
    // SAFETY: out-pointer to a local of the attribute's type (caller contract).
    unsafe { cu!(cuPointerGetAttribute((&mut value as *mut T).cast::<c_void>(), attribute, ptr))? };
    Ok(value)
}

impl UserAllocation {
    /// The allocation of `device` that holds `ptr`.
    pub fn containing(device: &Device, ptr: DevicePtr) -> Result<Self, GpuError> {
        use sys::CUpointer_attribute::*;
        let (base, size) = allocation_range(device, ptr)?;
        // SAFETY: the buffer id is an unsigned long long; the flag and the handle-type mask
        // are read into zeroed u64s, which hold them whatever width (at most 8 bytes,
        // little-endian) the driver writes.
        let (buffer_id, legacy) = unsafe {
            (
                attribute::<u64>(ptr, CU_POINTER_ATTRIBUTE_BUFFER_ID)?,
                attribute::<u64>(ptr, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)?,
            )
        };
        let fd_type = u64::from(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0);
        // Only VMM memory has handle types; elsewhere a failed query means "none".
        // SAFETY: as above.
        let handle_types = || unsafe { attribute::<u64>(ptr, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES) }.unwrap_or(0);
        let sharing = if legacy != 0 {
            Sharing::LegacyIpc
        } else if handle_types() & fd_type != 0 {
            Sharing::PosixFd
        } else {
            Sharing::None
        };
        Ok(Self { device: device.clone(), key: AllocationKey { base, size, buffer_id }, sharing })
    }

    /// Its identity.
    pub fn key(&self) -> AllocationKey {
        self.key
    }

    /// How another process can map it.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Exports a VMM allocation as a POSIX file descriptor (the descriptor keeps the physical
    /// memory alive until every holder closes it).
    pub fn export_fd(&self) -> Result<OwnedFd, GpuError> {
        if self.sharing != Sharing::PosixFd {
            return Err(GpuError::InvalidArgument("the allocation is not shareable as a file descriptor".into()));
        }
        self.device.bind()?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local; base is mapped VMM memory (its handle types say so).
        unsafe { cu!(cuMemRetainAllocationHandle(&mut handle, self.key.base as *mut c_void))? };
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for POSIX fd handles the driver writes an int through the pointer.
        let exported = unsafe {
            cu!(cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast::<c_void>(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0
            ))
        };
        // SAFETY: gives back the reference retained above; the application's own remains.
        let _ = unsafe { cu!(cuMemRelease(handle)) };
        exported?;
        // SAFETY: the driver returned a fresh descriptor that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Legacy IPC handle of a `cuMemAlloc` allocation.
    pub fn legacy_ipc_handle(&self) -> Result<LegacyIpcHandle, GpuError> {
        if self.sharing != Sharing::LegacyIpc {
            return Err(GpuError::InvalidArgument("the allocation has no legacy IPC handle".into()));
        }
        self.device.bind()?;
        // SAFETY: plain 64-byte C struct.
        let mut raw: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        // SAFETY: out-pointer to a local; base is the start of a cuMemAlloc allocation.
        unsafe { cu!(cuIpcGetMemHandle(&mut raw, self.key.base))? };
        Ok(LegacyIpcHandle(raw.reserved.map(|c| c as u8)))
    }

    /// Lets kernels on `peer` (same process) access the allocation through its address.
    pub fn grant_access(&self, peer: &Device) -> Result<(), GpuError> {
        match self.sharing {
            Sharing::PosixFd => {
                let desc = access_desc(peer);
                self.device.bind()?;
                // SAFETY: the range is one mapped allocation; desc is valid. Adding an access
                // right leaves the application's own ones in place.
                unsafe { cu!(cuMemSetAccess(self.key.base, self.key.size as usize, &desc, 1)) }
            }
            Sharing::LegacyIpc => peer.enable_peer_access(&self.device),
            Sharing::None => Err(GpuError::InvalidArgument("the allocation cannot be shared".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_contains_exactly_its_range() {
        let k = AllocationKey { base: 0x1000, size: 0x100, buffer_id: 7 };
        assert!(k.contains(0x1000, 0x100));
        assert!(k.contains(0x10ff, 1));
        assert!(!k.contains(0x10ff, 2));
        assert!(!k.contains(0xfff, 1));
        assert!(!k.contains(u64::MAX, 2));
        let again = AllocationKey { buffer_id: 8, ..k };
        assert_ne!(k, again, "a reallocation at the same address is another key");
    }
}

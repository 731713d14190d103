//! Typed device buffers ([`DeviceBuffer`]) and borrowed views of their elements
//! ([`DeviceSlice`], [`DeviceSliceMut`]): what weft's safe APIs take instead of raw addresses.
//!
//! # Why a view may be handed to asynchronous work safely
//! A call that enqueues work on a [`Stream`] borrows its views only while it runs, yet the
//! work runs later. The buffer's memory is therefore shared ([`Arc`]): the call hands the
//! stream a reference ([`DeviceSlice::retain_on`]), which the stream keeps until it is seen
//! idle ([`Stream::wait_idle`]); a stream dropped with work pending waits for it first (two
//! minutes at most: past that it leaks the memory rather than free it under running work). A
//! graph captured on the stream keeps the references too and passes them on to every stream
//! it is launched on. Dropping a [`DeviceBuffer`] only drops its own reference, so the memory
//! is freed once no queued work can touch it, never under a running kernel.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::device::Device;
use crate::driver::DevicePtr;
use crate::element::DeviceElement;
use crate::error::GpuError;
use crate::memory::{AllocKind, DeviceMemory};
use crate::stream::Stream;

/// `len` elements of `T` in device memory owned by this value (see the module docs for when
/// the memory is freed).
pub struct DeviceBuffer<T: DeviceElement> {
    memory: Arc<DeviceMemory>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: DeviceElement> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("dtype", &T::DTYPE)
            .field("len", &self.len)
            .field("memory", &self.memory)
            .finish()
    }
}

impl<T: DeviceElement> DeviceBuffer<T> {
    /// `len` elements (uninitialised: whatever the memory held) allocated with `cuMemAlloc`,
    /// as most applications' buffers are.
    pub fn new(device: &Device, len: usize) -> Result<Self, GpuError> {
        Self::alloc(device, len, AllocKind::Legacy)
    }

    /// `len` elements allocated the `kind` way.
    pub fn alloc(device: &Device, len: usize, kind: AllocKind) -> Result<Self, GpuError> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| GpuError::InvalidArgument(format!("{len} elements of {:?} overflow", T::DTYPE)))?;
        Ok(Self { memory: Arc::new(DeviceMemory::alloc(device, bytes, kind)?), len, _element: PhantomData })
    }

    /// A buffer holding a copy of `data`.
    pub fn from_host(device: &Device, data: &[T]) -> Result<Self, GpuError> {
        let mut buffer = Self::new(device, data.len())?;
        buffer.copy_from_host(data)?;
        Ok(buffer)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Device address of the first element.
    pub fn ptr(&self) -> DevicePtr {
        self.memory.ptr()
    }

    /// The GPU that holds the buffer.
    pub fn device(&self) -> &Device {
        self.memory.device()
    }

    /// The allocation underneath (its identity, export, peer access).
    pub fn memory(&self) -> &DeviceMemory {
        &self.memory
    }

    /// The shared allocation, for owners that must keep it alive on their own (a window).
    pub fn shared_memory(&self) -> &Arc<DeviceMemory> {
        &self.memory
    }

    /// The elements of `memory`, which must hold a whole number of them.
    pub fn from_memory(memory: DeviceMemory) -> Result<Self, GpuError> {
        let len = recount(memory.ptr(), memory.len(), size_of::<T>())?;
        Ok(Self { memory: Arc::new(memory), len, _element: PhantomData })
    }

    /// Every element, read-only.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice { span: Span { memory: &self.memory, offset: 0, len: self.len }, _element: PhantomData }
    }

    /// Every element, writable.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut { span: Span { memory: &self.memory, offset: 0, len: self.len }, _element: PhantomData }
    }

    /// Elements `range`, read-only.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>, GpuError> {
        self.as_slice().slice(range)
    }

    /// Elements `range`, writable.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>, GpuError> {
        self.as_mut_slice().into_slice_mut(range)
    }

    /// Copies `data` into the first `data.len()` elements (see [`DeviceSliceMut::copy_from_host`]).
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<(), GpuError> {
        self.as_mut_slice().copy_from_host(data)
    }

    /// A host copy of every element (see [`DeviceSlice::copy_to_host`]).
    pub fn to_vec(&self) -> Result<Vec<T>, GpuError> {
        self.as_slice().to_vec()
    }
}

/// The part of an allocation a view covers: `len` elements from byte `offset`.
#[derive(Clone, Copy)]
struct Span<'a> {
    memory: &'a Arc<DeviceMemory>,
    offset: usize,
    len: usize,
}

impl<'a> Span<'a> {
    fn ptr(&self) -> DevicePtr {
        self.memory.ptr() + self.offset as u64
    }

    /// Elements `range` of this span of `size`-byte elements.
    fn sub(self, range: impl RangeBounds<usize>, size: usize) -> Result<Self, GpuError> {
        let (start, end) = bounds(range, self.len)?;
        Ok(Self { memory: self.memory, offset: self.offset + start * size, len: end - start })
    }

    /// The same bytes as elements of `to` bytes instead of `from`.
    fn cast(self, from: usize, to: usize) -> Result<Self, GpuError> {
        Ok(Self { len: recount(self.ptr(), self.len * from, to)?, ..self })
    }
}

/// The elements `range` names in a view of `len`: `start..end`, checked.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize), GpuError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start <= end && end <= len => Ok((start, end)),
        _ => Err(GpuError::InvalidArgument(format!(
            "elements {:?}..{:?} outside a view of {len} elements",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

/// How many elements of `to` bytes the `bytes` at `ptr` are: an error unless whole and aligned.
fn recount(ptr: DevicePtr, bytes: usize, to: usize) -> Result<usize, GpuError> {
    if !bytes.is_multiple_of(to) || !ptr.is_multiple_of(to as u64) {
        return Err(GpuError::InvalidArgument(format!(
            "{bytes} bytes at {ptr:#x} are not whole, aligned elements of {to} bytes"
        )));
    }
    Ok(bytes / to)
}

/// The accessors both views have, over their [`Span`].
macro_rules! view_accessors {
    ($($view:ident),*) => {$(
        impl<'a, T: DeviceElement> $view<'a, T> {
            /// Device address of the first element.
            pub fn ptr(&self) -> DevicePtr {
                self.span.ptr()
            }

            /// Elements.
            pub fn len(&self) -> usize {
                self.span.len
            }

            /// Whether the view has no elements.
            pub fn is_empty(&self) -> bool {
                self.span.len == 0
            }

            /// The GPU that holds the elements.
            pub fn device(&self) -> &'a Device {
                self.span.memory.device()
            }

            /// Keeps the allocation alive until the work queued on `stream` so far has run: what
            /// a call that enqueues work on these elements does before it returns (see the
            /// module docs).
            pub fn retain_on(&self, stream: &Stream) {
                stream.retain(self.span.memory);
            }
        }

        impl<T: DeviceElement> DeviceView for $view<'_, T> {
            fn len(&self) -> usize {
                self.span.len
            }

            fn device(&self) -> &Device {
                self.span.memory.device()
            }

            fn retain_on(&self, stream: &Stream) {
                stream.retain(self.span.memory);
            }
        }
    )*};
}

/// What a call that enqueues work needs of any view, read-only or writable, whatever its
/// element type: to check it and to keep it alive (as the views' own methods of these names).
pub trait DeviceView {
    /// Elements.
    fn len(&self) -> usize;

    /// Whether the view has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GPU that holds the elements.
    fn device(&self) -> &Device;

    /// Keeps the allocation alive until the work queued on `stream` so far has run.
    fn retain_on(&self, stream: &Stream);
}

view_accessors!(DeviceSlice, DeviceSliceMut);

/// A read-only view of `len()` elements of a [`DeviceBuffer`].
pub struct DeviceSlice<'a, T: DeviceElement> {
    span: Span<'a>,
    _element: PhantomData<&'a [T]>,
}

impl<T: DeviceElement> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: DeviceElement> Copy for DeviceSlice<'_, T> {}

impl<T: DeviceElement> std::fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSlice<{:?}>({:#x}, {})", T::DTYPE, self.ptr(), self.len())
    }
}

impl<'a, T: DeviceElement> DeviceSlice<'a, T> {
    /// Bytes.
    pub fn byte_len(&self) -> usize {
        self.span.len * size_of::<T>()
    }

    /// Elements `range` of this view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>, GpuError> {
        Ok(DeviceSlice { span: self.span.sub(range, size_of::<T>())?, _element: PhantomData })
    }

    /// The same bytes as elements of `U` (an error unless they are whole, aligned `U`s).
    pub fn cast<U: DeviceElement>(&self) -> Result<DeviceSlice<'a, U>, GpuError> {
        Ok(DeviceSlice { span: self.span.cast(size_of::<T>(), size_of::<U>())?, _element: PhantomData })
    }

    /// Copies the elements into `out` (of the same length). Synchronous, through the legacy
    /// default stream: wait for the streams that write these elements first.
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<(), GpuError> {
        check_copy_len(out.len(), self.len())?;
        // SAFETY: T: Pod accepts any bit pattern, and the byte view covers exactly `out`.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out)) };
        self.span.memory.read(self.span.offset, bytes)
    }

    /// A host copy of the elements (as [`DeviceSlice::copy_to_host`]).
    pub fn to_vec(&self) -> Result<Vec<T>, GpuError> {
        let mut out = vec![T::default(); self.len()];
        self.copy_to_host(&mut out)?;
        Ok(out)
    }
}

/// A writable view of `len()` elements of a [`DeviceBuffer`]: exclusive, as `&mut [T]` is.
pub struct DeviceSliceMut<'a, T: DeviceElement> {
    span: Span<'a>,
    _element: PhantomData<&'a mut [T]>,
}

impl<T: DeviceElement> std::fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSliceMut<{:?}>({:#x}, {})", T::DTYPE, self.span.ptr(), self.span.len)
    }
}

impl<'a, T: DeviceElement> DeviceSliceMut<'a, T> {
    /// A read-only view of the same elements, for as long as it is borrowed.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice { span: self.span, _element: PhantomData }
    }

    /// A shorter-lived writable view of the same elements.
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut { span: self.span, _element: PhantomData }
    }

    /// Elements `range` of this view, writable while borrowed.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>, GpuError> {
        self.reborrow().into_slice_mut(range)
    }

    /// Elements `range` of this view, consuming it.
    pub fn into_slice_mut(self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'a, T>, GpuError> {
        Ok(DeviceSliceMut { span: self.span.sub(range, size_of::<T>())?, _element: PhantomData })
    }

    /// The first `mid` elements and the rest, both writable.
    pub fn split_at_mut(self, mid: usize) -> Result<(DeviceSliceMut<'a, T>, DeviceSliceMut<'a, T>), GpuError> {
        let (head, tail) = (self.span.sub(..mid, size_of::<T>())?, self.span.sub(mid.., size_of::<T>())?);
        Ok((DeviceSliceMut { span: head, _element: PhantomData }, DeviceSliceMut { span: tail, _element: PhantomData }))
    }

    /// The same bytes as elements of `U` (an error unless they are whole, aligned `U`s).
    pub fn cast_mut<U: DeviceElement>(self) -> Result<DeviceSliceMut<'a, U>, GpuError> {
        Ok(DeviceSliceMut { span: self.span.cast(size_of::<T>(), size_of::<U>())?, _element: PhantomData })
    }

    /// Copies `data` (of the same length) into the elements. Synchronous: the data is on the
    /// device when this returns; wait for the streams that use these elements first.
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<(), GpuError> {
        check_copy_len(self.len(), data.len())?;
        // SAFETY: T: Pod; the byte view covers exactly `data` and lives no longer than it.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        self.span.memory.write(self.span.offset, bytes)
    }

    /// Enqueues on `stream` a copy of `source` (of the same length, on this GPU or one this
    /// GPU can access) into these elements; the stream keeps both alive until it has run.
    pub fn copy_from_device(&mut self, source: &DeviceSlice<'_, T>, stream: &Stream) -> Result<(), GpuError> {
        check_copy_len(self.len(), source.len())?;
        // SAFETY: both views are live allocations holding `len` elements, and the stream keeps
        // both allocations until the copy has run (retained below, after enqueuing).
        let copied = unsafe { stream.copy_async(self.ptr(), source.ptr(), self.span.len * size_of::<T>()) };
        self.retain_on(stream);
        source.retain_on(stream);
        copied
    }

    /// Sets every byte of the elements to `byte` (synchronous, as
    /// [`DeviceSliceMut::copy_from_host`]).
    pub fn fill_bytes(&mut self, byte: u8) -> Result<(), GpuError> {
        self.span.memory.fill(self.span.offset, self.span.len * size_of::<T>(), byte)
    }
}

/// A copy's two sides hold as many elements.
fn check_copy_len(into: usize, from: usize) -> Result<(), GpuError> {
    if into == from {
        Ok(())
    } else {
        Err(GpuError::InvalidArgument(format!("a copy of {from} elements into a view of {into}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_inside_the_view_are_taken() {
        assert_eq!(bounds(.., 8).ok(), Some((0, 8)));
        assert_eq!(bounds(2..5, 8).ok(), Some((2, 5)));
        assert_eq!(bounds(3..=7, 8).ok(), Some((3, 8)));
        assert_eq!(bounds(8.., 8).ok(), Some((8, 8)));
        assert_eq!(bounds((Bound::Excluded(1), Bound::Unbounded), 8).ok(), Some((2, 8)));
    }

    #[test]
    fn ranges_past_the_view_are_refused() {
        assert!(bounds(0..9, 8).is_err());
        assert!(bounds((Bound::Included(5), Bound::Excluded(3)), 8).is_err());
        assert!(bounds(..=8, 8).is_err());
        assert!(bounds(..=usize::MAX, 8).is_err());
        assert!(bounds((Bound::Excluded(usize::MAX), Bound::Unbounded), 8).is_err());
    }

    #[test]
    fn casts_need_whole_aligned_elements() {
        assert_eq!(recount(0x1000, 16, 4).ok(), Some(4));
        assert_eq!(recount(0x1000, 16, 1).ok(), Some(16));
        assert!(recount(0x1000, 6, 4).is_err());
        assert!(recount(0x1002, 8, 4).is_err());
    }
}

//! The typed collective API: every call takes views of [`DeviceBuffer`]s, checks their
//! lengths against the communicator and their GPU against its, and forwards to the raw layer
//! (`raw.rs`).
//!
//! # Why these calls are safe
//! The raw layer's contract has three parts, each upheld here:
//! - *Valid memory for the lengths the call implies*: a view is memory of a live buffer, and
//!   the lengths are checked ([`CollError::Length`]), so the raw call gets counts derived from
//!   the views themselves.
//! - *Valid until the stream's work is done*: after enqueuing, each call hands the stream a
//!   reference to every buffer it named ([`DeviceSlice::retain_on`]); the stream, or a graph
//!   captured on it and every stream that replays the graph, holds it until seen idle, so
//!   dropping a buffer never frees memory under queued work (see weft-gpu's `buffer.rs`).
//! - *Matching calls on every rank*: a rank that calls differently from its peers hangs or
//!   computes wrong values in the buffers the ranks handed in. Peers write into this rank's
//!   memory only through scratch, through buffers the zero-copy agreement mapped after
//!   comparing every rank's length, or through windows, which have one length everywhere:
//!   never outside what this rank named.
//!
//! Views of one buffer cannot alias a writable view (the borrow checker), so out-of-place
//! calls never overlap; the in-place forms take one writable view.

use weft_gpu::{Device, DeviceBuffer, DeviceElement, DevicePtr, DeviceSlice, DeviceSliceMut, DeviceView, Stream};
use weft_types::ReduceOp;

use crate::algorithm::{Algorithm, Collective};
use crate::collectives::{Collectives, P2pKind, P2pOp};
use crate::error::CollError;
use crate::lengths::Lengths;
use crate::reduction::{Reduction, Scalar};
use crate::window::Window;

/// What a reducing call of the typed API computes.
#[derive(Clone, Copy, Debug)]
pub enum Operator<'a, T: DeviceElement> {
    /// An operator without an argument, or PreMulSum with an immediate scalar
    /// ([`Scalar::Immediate`]; a device address is refused: use
    /// [`Operator::PreMulSumOnDevice`]).
    Host(Reduction),
    /// PreMulSum with this rank's scalar, the one element of the view, read when the kernel
    /// runs (by every replay of a captured call).
    PreMulSumOnDevice(DeviceSlice<'a, T>),
}

impl<T: DeviceElement> From<ReduceOp> for Operator<'_, T> {
    fn from(op: ReduceOp) -> Self {
        Self::Host(op.into())
    }
}

impl<T: DeviceElement> From<Reduction> for Operator<'_, T> {
    fn from(reduction: Reduction) -> Self {
        Self::Host(reduction)
    }
}

/// A group of sends and receives for [`Collectives::send_recv`], each matched with the
/// peer's operation of the same direction in order (NCCL's grouped `ncclSend` / `ncclRecv`).
#[derive(Debug, Default)]
pub struct P2pGroup<'a> {
    ops: Vec<P2pOp>,
    sends: Vec<DeviceSlice<'a, u8>>,
    receives: Vec<DeviceSliceMut<'a, u8>>,
}

impl<'a> P2pGroup<'a> {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `data` to `peer` (this rank: copied into a matching receive from it).
    pub fn send<T: DeviceElement>(&mut self, peer: usize, data: DeviceSlice<'a, T>) -> &mut Self {
        self.ops.push(P2pOp { kind: P2pKind::Send, peer, ptr: data.ptr(), count: data.len(), dtype: T::DTYPE });
        // Whole bytes of a whole buffer: the cast cannot fail.
        self.sends.extend(data.cast::<u8>().ok());
        self
    }

    /// Receives `into.len()` elements from `peer` into `into`.
    pub fn recv<T: DeviceElement>(&mut self, peer: usize, into: DeviceSliceMut<'a, T>) -> &mut Self {
        self.ops.push(P2pOp { kind: P2pKind::Recv, peer, ptr: into.ptr(), count: into.len(), dtype: T::DTYPE });
        self.receives.extend(into.cast_mut::<u8>().ok());
        self
    }

    /// Sends `buffer`'s elements to `to` and receives as many from `from` into it: the send
    /// reads a copy staged first, so it sends what the buffer held before the group.
    pub fn send_recv_in_place<T: DeviceElement>(
        &mut self,
        to: usize,
        from: usize,
        buffer: DeviceSliceMut<'a, T>,
    ) -> &mut Self {
        let (ptr, count, dtype) = (buffer.ptr(), buffer.len(), T::DTYPE);
        self.ops.push(P2pOp { kind: P2pKind::Send, peer: to, ptr, count, dtype });
        self.ops.push(P2pOp { kind: P2pKind::Recv, peer: from, ptr, count, dtype });
        self.receives.extend(buffer.cast_mut::<u8>().ok());
        self
    }

    fn devices(&self) -> impl Iterator<Item = (&'static str, &Device)> + '_ {
        let sends = self.sends.iter().map(|s| ("a send buffer", s.device()));
        sends.chain(self.receives.iter().map(|r| ("a recv buffer", r.device())))
    }

    fn retain_on(&self, stream: &Stream) {
        self.sends.iter().for_each(|s| s.retain_on(stream));
        self.receives.iter().for_each(|r| r.retain_on(stream));
    }
}

impl<T: DeviceElement> Operator<'_, T> {
    /// Has `stream` keep the device scalar, if any, alive (see the module docs).
    fn retain_on(&self, stream: &Stream) {
        if let Self::PreMulSumOnDevice(scalar) = self {
            scalar.retain_on(stream);
        }
    }
}

impl Collectives {
    fn lengths(&self) -> Lengths {
        Lengths { rank: self.communicator().rank(), ranks: self.communicator().world_size() }
    }

    /// Every named buffer is on this rank's GPU.
    fn on_this_gpu<'d>(&self, buffers: impl IntoIterator<Item = (&'static str, &'d Device)>) -> Result<(), CollError> {
        let (rank, expected) = (self.communicator().rank(), self.communicator().device().ordinal());
        for (buffer, device) in buffers {
            if device.ordinal() != expected {
                return Err(CollError::WrongDevice { rank, buffer, found: device.ordinal(), expected });
            }
        }
        Ok(())
    }

    /// The raw layer's reduction for `op`, checked: a device scalar is one element of this GPU.
    fn raw_reduction<T: DeviceElement>(&self, op: &Operator<'_, T>) -> Result<Reduction, CollError> {
        let rank = self.communicator().rank();
        match *op {
            Operator::Host(Reduction::PreMulSum { scalar: Scalar::Device(_), .. }) => Err(CollError::InvalidArgument {
                rank,
                detail: "a device scalar is passed as Operator::PreMulSumOnDevice, a view the stream keeps alive"
                    .into(),
            }),
            Operator::Host(reduction) => Ok(reduction),
            Operator::PreMulSumOnDevice(scalar) => {
                if scalar.len() != 1 {
                    let expected = crate::error::Expected::Exactly(1);
                    return Err(CollError::Length { rank, buffer: "scalar", actual: scalar.len(), expected });
                }
                self.on_this_gpu([("the scalar", scalar.device())])?;
                Ok(Reduction::PreMulSum { dtype: T::DTYPE, scalar: Scalar::Device(scalar.ptr()) })
            }
        }
    }

    /// What every call on views shares once their lengths are checked: the `views` (named for
    /// errors) on this GPU, then `raw` (a raw call on them), then the stream keeps every view
    /// alive: after, so that a concurrent [`Stream::wait_idle`] either sees this work or leaves
    /// the references in place.
    fn call(
        &self,
        views: &[(&'static str, &dyn DeviceView)],
        stream: &Stream,
        raw: impl FnOnce() -> Result<Algorithm, CollError>,
    ) -> Result<Algorithm, CollError> {
        self.on_this_gpu(views.iter().map(|&(name, view)| (name, view.device())))?;
        let result = raw();
        views.iter().for_each(|(_, view)| view.retain_on(stream));
        result
    }

    /// [`Collectives::call`] for a reducing call: `op` resolved (a device scalar checked and
    /// kept alive too) into the reduction `raw` takes.
    fn reducing_call<'o, T: DeviceElement>(
        &self,
        views: &[(&'static str, &dyn DeviceView)],
        op: impl Into<Operator<'o, T>>,
        stream: &Stream,
        raw: impl FnOnce(Reduction) -> Result<Algorithm, CollError>,
    ) -> Result<Algorithm, CollError> {
        let op = op.into();
        let reduction = self.raw_reduction(&op)?;
        let result = self.call(views, stream, || raw(reduction));
        op.retain_on(stream);
        result
    }

    /// AllReduce of `send` into `recv` (of the same length) with `op` (a [`ReduceOp`], a
    /// [`Reduction`] or an [`Operator`]). Captured into a CUDA graph, a call of the HB
    /// algorithm writes straight into every rank's `recv`.
    pub fn all_reduce<'o, T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: impl Into<Operator<'o, T>>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllReduce, T::DTYPE, || {
            let count = self.lengths().same(send.len(), recv.len())?;
            // SAFETY: both views are live memory of this GPU holding `count` elements of T (checked),
            // kept alive by the stream until its work has run (`call`); see the module docs.
            self.reducing_call(&[("send", send), ("recv", recv)], op, stream, |reduction| unsafe {
                self.raw_all_reduce(send.ptr(), recv.ptr(), count, T::DTYPE, reduction, stream)
            })
        })
    }

    /// AllReduce of `buffer` in place.
    pub fn all_reduce_in_place<'o, T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        op: impl Into<Operator<'o, T>>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllReduce, T::DTYPE, || {
            // SAFETY: as in `all_reduce`, on one view.
            self.reducing_call(&[("buffer", buffer)], op, stream, |reduction| unsafe {
                self.raw_all_reduce(buffer.ptr(), buffer.ptr(), buffer.len(), T::DTYPE, reduction, stream)
            })
        })
    }

    /// AllGather: every rank's `send` into `recv`, which holds `ranks × send.len()` elements in
    /// rank order.
    pub fn all_gather<T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllGather, T::DTYPE, || {
            let count = self.lengths().all_gather(send.len(), recv.len())?;
            // SAFETY: as in `all_reduce`; recv holds ranks × count elements (checked).
            self.call(&[("send", send), ("recv", recv)], stream, || unsafe {
                self.raw_all_gather(send.ptr(), recv.ptr(), count, T::DTYPE, stream)
            })
        })
    }

    /// AllGather in place: `buffer` holds a block per rank, this rank's block its input.
    pub fn all_gather_in_place<T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllGather, T::DTYPE, || {
            let lengths = self.lengths();
            let count = lengths.in_place_blocks(buffer.len())?;
            let send = element(buffer.ptr(), lengths.own_block(count), T::DTYPE.size());
            // SAFETY: as in `all_reduce`; the send block is block `rank` of the buffer, the
            // raw layer's in-place layout.
            self.call(&[("buffer", buffer)], stream, || unsafe {
                self.raw_all_gather(send, buffer.ptr(), count, T::DTYPE, stream)
            })
        })
    }

    /// ReduceScatter: block r (`recv.len()` elements) of every rank's `send` (`ranks ×
    /// recv.len()`) reduced with `op` into rank r's `recv`.
    pub fn reduce_scatter<'o, T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: impl Into<Operator<'o, T>>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::ReduceScatter, T::DTYPE, || {
            let count = self.lengths().reduce_scatter(send.len(), recv.len())?;
            // SAFETY: as in `all_reduce`; send holds ranks × count elements (checked).
            self.reducing_call(&[("send", send), ("recv", recv)], op, stream, |reduction| unsafe {
                self.raw_reduce_scatter(send.ptr(), recv.ptr(), count, T::DTYPE, reduction, stream)
            })
        })
    }

    /// ReduceScatter in place: `buffer` holds a block per rank; this rank's block gets the
    /// result.
    pub fn reduce_scatter_in_place<'o, T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        op: impl Into<Operator<'o, T>>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::ReduceScatter, T::DTYPE, || {
            let lengths = self.lengths();
            let count = lengths.in_place_blocks(buffer.len())?;
            let recv = element(buffer.ptr(), lengths.own_block(count), T::DTYPE.size());
            // SAFETY: as in `all_gather_in_place`.
            self.reducing_call(&[("buffer", buffer)], op, stream, |reduction| unsafe {
                self.raw_reduce_scatter(buffer.ptr(), recv, count, T::DTYPE, reduction, stream)
            })
        })
    }

    /// Broadcast of the root's `send` into every rank's `recv`: `send` is needed on the root
    /// only (of `recv`'s length) and ignored elsewhere.
    pub fn broadcast<T: DeviceElement>(
        &self,
        send: Option<&DeviceSlice<'_, T>>,
        recv: &mut DeviceSliceMut<'_, T>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::Broadcast, T::DTYPE, || {
            let on_root = self.communicator().rank() == root;
            let send = self.root_buffer(send.filter(|_| on_root), on_root, "send")?;
            let mut views: Vec<(&'static str, &dyn DeviceView)> = vec![("recv", recv)];
            if let Some(send) = send {
                self.lengths().same(send.len(), recv.len())?;
                views.push(("send", send));
            }
            // A rank other than the root never reads `send`: it gets `recv`'s address.
            let from = send.map_or(recv.ptr(), |s| s.ptr());
            // SAFETY: as in `all_reduce`; the root's send holds recv's count (checked).
            self.call(&views, stream, || unsafe {
                self.raw_broadcast(from, recv.ptr(), recv.len(), T::DTYPE, root, stream)
            })
        })
    }

    /// Broadcast in place: the root's `buffer` into every rank's.
    pub fn broadcast_in_place<T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::Broadcast, T::DTYPE, || {
            // SAFETY: as in `all_reduce`, on one view.
            self.call(&[("buffer", buffer)], stream, || unsafe {
                self.raw_broadcast(buffer.ptr(), buffer.ptr(), buffer.len(), T::DTYPE, root, stream)
            })
        })
    }

    /// Reduce of every rank's `send` with `op` into the root's `recv`: `recv` is needed on
    /// the root only (of `send`'s length) and ignored elsewhere.
    pub fn reduce<'o, T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: Option<&mut DeviceSliceMut<'_, T>>,
        op: impl Into<Operator<'o, T>>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::Reduce, T::DTYPE, || {
            let on_root = self.communicator().rank() == root;
            let recv = self.root_buffer(recv.filter(|_| on_root), on_root, "recv")?;
            let mut views: Vec<(&'static str, &dyn DeviceView)> = vec![("send", send)];
            if let Some(recv) = &recv {
                self.lengths().same(send.len(), recv.len())?;
                views.push(("recv", &**recv));
            }
            // A rank other than the root never writes `recv`: it gets `send`'s address.
            let to = recv.as_ref().map_or(send.ptr(), |r| r.ptr());
            // SAFETY: as in `all_reduce`; the root's recv holds send's count (checked).
            self.reducing_call(&views, op, stream, |reduction| unsafe {
                self.raw_reduce(send.ptr(), to, send.len(), T::DTYPE, reduction, root, stream)
            })
        })
    }

    /// Reduce in place: every rank's `buffer` reduced with `op` into the root's.
    pub fn reduce_in_place<'o, T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        op: impl Into<Operator<'o, T>>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::Reduce, T::DTYPE, || {
            // SAFETY: as in `all_reduce`, on one view.
            self.reducing_call(&[("buffer", buffer)], op, stream, |reduction| unsafe {
                self.raw_reduce(buffer.ptr(), buffer.ptr(), buffer.len(), T::DTYPE, reduction, root, stream)
            })
        })
    }

    /// The buffer only the root uses: required there, dropped elsewhere.
    fn root_buffer<B>(&self, buffer: Option<B>, on_root: bool, what: &str) -> Result<Option<B>, CollError> {
        if on_root && buffer.is_none() {
            let rank = self.communicator().rank();
            return Err(CollError::InvalidArgument { rank, detail: format!("the root needs its {what} buffer") });
        }
        Ok(buffer)
    }

    /// AllToAll: block p of `send` (a block per rank) goes to rank p, block p of `recv` comes
    /// from rank p.
    pub fn all_to_all<T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllToAll, T::DTYPE, || {
            let count = self.lengths().all_to_all(send.len(), recv.len())?;
            // SAFETY: as in `all_reduce`; both hold ranks × count elements (checked).
            self.call(&[("send", send), ("recv", recv)], stream, || unsafe {
                self.raw_all_to_all(send.ptr(), recv.ptr(), count, T::DTYPE, stream)
            })
        })
    }

    /// AllToAll in place (the input is staged first: the result is the out-of-place one).
    pub fn all_to_all_in_place<T: DeviceElement>(
        &self,
        buffer: &mut DeviceSliceMut<'_, T>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllToAll, T::DTYPE, || {
            let count = self.lengths().in_place_blocks(buffer.len())?;
            // SAFETY: as in `all_reduce`, on one view of ranks × count elements.
            self.call(&[("buffer", buffer)], stream, || unsafe {
                self.raw_all_to_all(buffer.ptr(), buffer.ptr(), count, T::DTYPE, stream)
            })
        })
    }

    /// AllToAllv: `send_counts[p]` elements from `send_displs[p]` of `send` go to rank p,
    /// `recv_counts[p]` elements from rank p land at `recv_displs[p]` of `recv`; every block
    /// must lie inside its view.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_allv<T: DeviceElement>(
        &self,
        send: &DeviceSlice<'_, T>,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut DeviceSliceMut<'_, T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.with_call_check(Collective::AllToAll, T::DTYPE, || {
            let lengths = self.lengths();
            lengths.uneven_blocks("send", send.len(), send_counts, send_displs)?;
            lengths.uneven_blocks("recv", recv.len(), recv_counts, recv_displs)?;
            // SAFETY: as in `all_reduce`; every block lies inside its view (checked).
            self.call(&[("send", send), ("recv", recv)], stream, || unsafe {
                self.raw_all_to_allv(
                    send.ptr(),
                    send_counts,
                    send_displs,
                    recv.ptr(),
                    recv_counts,
                    recv_displs,
                    T::DTYPE,
                    stream,
                )
            })
        })
    }

    /// The sends and receives of `group`, progressing together.
    pub fn send_recv(&self, group: &P2pGroup<'_>, stream: &Stream) -> Result<Algorithm, CollError> {
        self.on_this_gpu(group.devices())?;
        // SAFETY: every operation's count is its view's length, on this GPU (checked); the
        // stream keeps every view alive (retained after enqueuing, as in `call`).
        let result = unsafe { self.raw_send_recv(&group.ops, stream) };
        group.retain_on(stream);
        result
    }

    /// Registers `buffer` as a window (NCCL's symmetric window): collective, every rank calls
    /// it with a buffer of the same length, in the same order of registrations, and blocks
    /// until every rank has mapped every other rank's buffer (see
    /// [`crate::RawCollectives::register_window`]). From then on, a call whose output lies
    /// inside the window at an offset every rank passes alike writes straight into the peers'
    /// windows. The registration holds the buffer's memory until
    /// [`Collectives::deregister_window`], whatever becomes of `buffer` meanwhile.
    pub fn register_window<T: DeviceElement>(&self, buffer: &DeviceBuffer<T>) -> Result<Window, CollError> {
        self.on_this_gpu([("the window's buffer", buffer.device())])?;
        let memory = std::sync::Arc::clone(buffer.shared_memory());
        // SAFETY: the registration holds the memory until deregistered, and
        // `deregister_window` waits for this GPU's work before the ranks drop their mappings.
        unsafe { self.raw_register_window(buffer.ptr(), buffer.len() * size_of::<T>(), Some(memory)) }
    }

    /// Deregisters `window`: collective, every rank calls it for the window it registered at
    /// the same position. Waits for all work on this rank's GPU first, so that once the ranks'
    /// exchange completes no kernel still writes through a mapping (a set-up call: a
    /// device-wide wait is affordable there); then the registration lets go of the memory.
    pub fn deregister_window(&self, window: &Window) -> Result<(), CollError> {
        let rank = self.communicator().rank();
        self.communicator().device().synchronize().map_err(|source| CollError::Gpu { rank, source })?;
        self.raw_deregister_window(window)
    }
}

/// The address of element `index` of `size` bytes from `base`.
fn element(base: DevicePtr, index: usize, size: usize) -> DevicePtr {
    base + (index * size) as u64
}

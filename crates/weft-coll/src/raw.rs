//! The raw-pointer layer of the collective API: the calls of [`Collectives`] on device
//! addresses, whose lifetimes and lengths the caller vouches for. It exists for the layers
//! that receive raw pointers themselves (weft-nccl's C ABI, bindings to other languages);
//! Rust code uses the typed API of `typed.rs`, which checks every length and keeps every
//! buffer alive until the stream work that uses it has run.

use weft_gpu::{DevicePtr, Stream};
use weft_types::DataType;

use crate::algorithm::Algorithm;
use crate::collectives::{Collectives, P2pOp};
use crate::error::CollError;
use crate::reduction::Reduction;
use crate::window::Window;

/// The raw-pointer calls of one rank's [`Collectives`] (see [`Collectives::raw`]).
///
/// # Safety contract of every call
/// Every buffer must stay valid device memory of this rank's GPU for the lengths the call
/// implies until the work enqueued on `stream` has finished (for a captured call: while the
/// graph may be replayed), and every rank must make the matching call (same count, type,
/// operator, root) in the same order, captured on every rank or on none. A PreMulSum scalar in
/// device memory must stay valid likewise. The calls check what they can (each range lies in
/// one allocation of this GPU, the in-place layouts, the root), never a lifetime.
#[derive(Clone, Copy, Debug)]
pub struct RawCollectives<'a>(&'a Collectives);

impl Collectives {
    /// The raw-pointer calls of this rank.
    pub fn raw(&self) -> RawCollectives<'_> {
        RawCollectives(self)
    }
}

impl RawCollectives<'_> {
    /// AllReduce of `count` elements from `send` into `recv` (equal: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    pub unsafe fn all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_all_reduce(send, recv, count, dtype, op, stream) }
    }

    /// AllGather of `send_count` elements from every rank into `recv` (`ranks * send_count`
    /// elements, rank order); in place when `send == recv + rank * send bytes`.
    ///
    /// # Safety
    /// See [`RawCollectives`].
    pub unsafe fn all_gather(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        send_count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_all_gather(send, recv, send_count, dtype, stream) }
    }

    /// ReduceScatter: block r (`recv_count` elements) of every rank's `send` reduced into rank
    /// r's `recv`; in place when `recv == send + rank * recv bytes`.
    ///
    /// # Safety
    /// See [`RawCollectives`].
    pub unsafe fn reduce_scatter(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_reduce_scatter(send, recv, recv_count, dtype, op, stream) }
    }

    /// Broadcast of `count` elements from the root's `send` into every rank's `recv` (`send`
    /// is read on the root only; equal to `recv`: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    pub unsafe fn broadcast(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_broadcast(send, recv, count, dtype, root, stream) }
    }

    /// Reduce of `count` elements of every rank's `send` into the root's `recv` (written on
    /// the root only; equal to `send`: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_reduce(send, recv, count, dtype, op, root, stream) }
    }

    /// AllToAll of blocks of `count` elements (`send` and `recv` disjoint, or equal: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    pub unsafe fn all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_all_to_all(send, recv, count, dtype, stream) }
    }

    /// AllToAllv: `send_counts[p]` elements at `send + send_displs[p]` go to rank p,
    /// `recv_counts[p]` elements from rank p land at `recv + recv_displs[p]` (in elements).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_to_allv(
        &self,
        send: DevicePtr,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: DevicePtr,
        recv_counts: &[usize],
        recv_displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype, stream) }
    }

    /// A group of sends and receives that progress together (NCCL's grouped `ncclSend` /
    /// `ncclRecv`), matched with the peers' per (peer, direction) in order.
    ///
    /// # Safety
    /// See [`RawCollectives`]; the peers must post the matching operations.
    pub unsafe fn send_recv(&self, ops: &[P2pOp], stream: &Stream) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_send_recv(ops, stream) }
    }

    /// Registers `[base, base + len)` as a window (NCCL's symmetric window): collective, and
    /// blocking until every rank has mapped every other rank's buffer.
    ///
    /// # Safety
    /// The memory must stay allocated until [`RawCollectives::deregister_window`] returns on
    /// every rank; peers write into it during the calls that name it.
    pub unsafe fn register_window(&self, base: DevicePtr, len: usize) -> Result<Window, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.raw_register_window(base, len, None) }
    }

    /// Deregisters `window`: collective, every rank calls it for the window it registered at
    /// the same position; the ranks then drop their mappings of each other's buffers.
    ///
    /// # Safety
    /// Every call that used the window must have completed on every rank's GPU (NCCL's
    /// contract): a kernel still writing through a mapping would fault.
    pub unsafe fn deregister_window(&self, window: &Window) -> Result<(), CollError> {
        self.0.raw_deregister_window(window)
    }
}

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

/// Declares each raw call once, as the crate-private `Collectives` method it forwards to under
/// the same contract: its documentation, name, that method and the arguments.
macro_rules! raw_calls {
    ($($(#[$attr:meta])* fn $name:ident => $inner:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        impl RawCollectives<'_> {
            $(
                $(#[$attr])*
                pub unsafe fn $name(&self, $($arg: $ty),*) -> Result<Algorithm, CollError> {
                    // SAFETY: forwarded caller contract.
                    unsafe { self.0.$inner($($arg),*) }
                }
            )*
        }
    };
}

raw_calls! {
    /// AllReduce of `count` elements from `send` into `recv` (equal: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    fn all_reduce => raw_all_reduce(
        send: DevicePtr, recv: DevicePtr, count: usize, dtype: DataType, op: impl Into<Reduction>, stream: &Stream,
    );

    /// AllGather of `send_count` elements from every rank into `recv` (`ranks * send_count`
    /// elements, rank order); in place when `send == recv + rank * send bytes`.
    ///
    /// # Safety
    /// See [`RawCollectives`].
    fn all_gather => raw_all_gather(
        send: DevicePtr, recv: DevicePtr, send_count: usize, dtype: DataType, stream: &Stream,
    );

    /// ReduceScatter: block r (`recv_count` elements) of every rank's `send` reduced into rank
    /// r's `recv`; in place when `recv == send + rank * recv bytes`.
    ///
    /// # Safety
    /// See [`RawCollectives`].
    fn reduce_scatter => raw_reduce_scatter(
        send: DevicePtr, recv: DevicePtr, recv_count: usize, dtype: DataType, op: impl Into<Reduction>, stream: &Stream,
    );

    /// Broadcast of `count` elements from the root's `send` into every rank's `recv` (`send`
    /// is read on the root only; equal to `recv`: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    fn broadcast => raw_broadcast(
        send: DevicePtr, recv: DevicePtr, count: usize, dtype: DataType, root: usize, stream: &Stream,
    );

    /// Reduce of `count` elements of every rank's `send` into the root's `recv` (written on
    /// the root only; equal to `send`: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    #[allow(clippy::too_many_arguments)]
    fn reduce => raw_reduce(
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        root: usize,
        stream: &Stream,
    );

    /// AllToAll of blocks of `count` elements (`send` and `recv` disjoint, or equal: in place).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    fn all_to_all => raw_all_to_all(send: DevicePtr, recv: DevicePtr, count: usize, dtype: DataType, stream: &Stream);

    /// AllToAllv: `send_counts[p]` elements at `send + send_displs[p]` go to rank p,
    /// `recv_counts[p]` elements from rank p land at `recv + recv_displs[p]` (in elements).
    ///
    /// # Safety
    /// See [`RawCollectives`].
    #[allow(clippy::too_many_arguments)]
    fn all_to_allv => raw_all_to_allv(
        send: DevicePtr,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: DevicePtr,
        recv_counts: &[usize],
        recv_displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    );

    /// A group of sends and receives that progress together (NCCL's grouped `ncclSend` /
    /// `ncclRecv`), matched with the peers' per (peer, direction) in order.
    ///
    /// # Safety
    /// See [`RawCollectives`]; the peers must post the matching operations.
    fn send_recv => raw_send_recv(ops: &[P2pOp], stream: &Stream);
}

impl RawCollectives<'_> {
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

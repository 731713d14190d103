//! The collective calls of `weft._weft`: each takes a `Communicator`, raw device addresses,
//! element counts, weft's type and operator names (`bf16`, `sum`, ...) and a CUDA stream handle,
//! and enqueues weft_coll's call on that stream, with the GIL released. The Python package
//! checks every tensor first (`weft/_tensor.py`) and derives these arguments; weft checks them
//! again (every buffer must lie in this rank's GPU memory), so a wrong address is an
//! `InvalidArgumentError`, not a fault.
//!
//! These functions are the only binding of weft_coll's raw-pointer layer.

// The closures pass on weft_coll's `CollError` as its calls return it (by value); it is turned
// into a Python exception once, in `on_stream`.
#![allow(clippy::result_large_err)]

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use weft::coll::{P2pKind, P2pOp};
use weft::gpu::{DevicePtr, Stream};
use weft::{Collectives, DataType, ReduceOp};

use crate::communicator::Communicator;
use crate::error::coll_to_py;

fn dtype(name: &str) -> PyResult<DataType> {
    DataType::from_name(name).ok_or_else(|| PyValueError::new_err(format!("dtype: weft has no element type {name:?}")))
}

fn op(name: &str) -> PyResult<ReduceOp> {
    ReduceOp::from_name(name)
        .filter(|o| ReduceOp::BUILTIN.contains(o))
        .ok_or_else(|| PyValueError::new_err(format!("op: weft has no reduction {name:?}")))
}

/// Runs `call` on `comm`'s collectives and the stream whose handle is `stream`, without the GIL.
fn on_stream<R: Send>(
    comm: &Bound<'_, Communicator>,
    stream: usize,
    call: impl FnOnce(&Collectives, &Stream) -> Result<R, weft::coll::CollError> + Send,
) -> PyResult<R> {
    let coll = &comm.get().coll;
    comm.py()
        .detach(|| {
            // SAFETY: the handle is the caller's live stream of this GPU's primary context (the
            // current torch stream, or one the caller named), used only for the enqueues of this
            // call; weft checks that it belongs to the communicator's GPU.
            let stream =
                unsafe { Stream::borrowed(coll.communicator().device(), stream as *mut std::ffi::c_void as _) };
            call(coll, &stream)
        })
        .map_err(coll_to_py)
}

/// AllReduce of `count` elements from `send` into `recv` (equal: in place).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn all_reduce(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dtype: &str,
    op: &str,
    stream: usize,
) -> PyResult<()> {
    let (dtype, op) = (self::dtype(dtype)?, self::op(op)?);
    // SAFETY: the Python layer passes the addresses of live tensors of this GPU sized for the
    // call and keeps them referenced by the caller until the stream's work is done (the same
    // contract as torch.distributed); weft checks the ranges lie in this GPU's memory.
    on_stream(comm, stream, |c, s| unsafe { c.raw().all_reduce(send, recv, count, dtype, op, s) }.map(drop))
}

/// AllGather of `send_count` elements per rank into `recv` (rank order).
#[pyfunction]
fn all_gather(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    send_count: usize,
    dtype: &str,
    stream: usize,
) -> PyResult<()> {
    let dtype = self::dtype(dtype)?;
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().all_gather(send, recv, send_count, dtype, s) }.map(drop))
}

/// ReduceScatter: block r (`recv_count` elements) of every rank's `send` reduced into rank r's
/// `recv`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn reduce_scatter(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    recv_count: usize,
    dtype: &str,
    op: &str,
    stream: usize,
) -> PyResult<()> {
    let (dtype, op) = (self::dtype(dtype)?, self::op(op)?);
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().reduce_scatter(send, recv, recv_count, dtype, op, s) }.map(drop))
}

/// Broadcast of `count` elements from the root's `send` into every rank's `recv`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn broadcast(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dtype: &str,
    root: usize,
    stream: usize,
) -> PyResult<()> {
    let dtype = self::dtype(dtype)?;
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().broadcast(send, recv, count, dtype, root, s) }.map(drop))
}

/// Reduce of `count` elements of every rank's `send` into the root's `recv`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn reduce(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dtype: &str,
    op: &str,
    root: usize,
    stream: usize,
) -> PyResult<()> {
    let (dtype, op) = (self::dtype(dtype)?, self::op(op)?);
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().reduce(send, recv, count, dtype, op, root, s) }.map(drop))
}

/// AllToAll: block p (`count` elements) of `send` goes to rank p, block p of `recv` comes from
/// rank p (`send` may equal `recv`).
#[pyfunction]
fn all_to_all(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dtype: &str,
    stream: usize,
) -> PyResult<()> {
    let dtype = self::dtype(dtype)?;
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().all_to_all(send, recv, count, dtype, s) }.map(drop))
}

/// AllToAllv: `send_counts[p]` elements at `send + send_displs[p]` go to rank p, and
/// `recv_counts[p]` from rank p land at `recv + recv_displs[p]` (counts and displacements in
/// elements).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn all_to_allv(
    comm: &Bound<'_, Communicator>,
    send: DevicePtr,
    send_counts: Vec<usize>,
    send_displs: Vec<usize>,
    recv: DevicePtr,
    recv_counts: Vec<usize>,
    recv_displs: Vec<usize>,
    dtype: &str,
    stream: usize,
) -> PyResult<()> {
    let dtype = self::dtype(dtype)?;
    on_stream(comm, stream, |c, s| {
        // SAFETY: as in all_reduce.
        unsafe { c.raw().all_to_allv(send, &send_counts, &send_displs, recv, &recv_counts, &recv_displs, dtype, s) }
            .map(drop)
    })
}

/// A group of point-to-point operations that progress together, each `(is_send, peer, ptr,
/// count, dtype)`.
#[pyfunction]
fn send_recv(
    comm: &Bound<'_, Communicator>,
    ops: Vec<(bool, usize, DevicePtr, usize, String)>,
    stream: usize,
) -> PyResult<()> {
    let ops = ops
        .into_iter()
        .map(|(is_send, peer, ptr, count, name)| {
            let kind = if is_send { P2pKind::Send } else { P2pKind::Recv };
            Ok(P2pOp { kind, peer, ptr, count, dtype: dtype(&name)? })
        })
        .collect::<PyResult<Vec<_>>>()?;
    // SAFETY: as in all_reduce.
    on_stream(comm, stream, |c, s| unsafe { c.raw().send_recv(&ops, s) }.map(drop))
}

/// Compiles (or loads from the kernel cache) every kernel calls on `dtype` with `op` may use:
/// call it before capturing a CUDA graph to keep compilation out of the capture.
#[pyfunction]
fn prepare(comm: &Bound<'_, Communicator>, dtype: &str, op: &str) -> PyResult<()> {
    let (dtype, op) = (self::dtype(dtype)?, self::op(op)?);
    let coll = &comm.get().coll;
    comm.py().detach(|| coll.prepare(dtype, op)).map_err(coll_to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(all_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(all_gather, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(all_to_all, m)?)?;
    m.add_function(wrap_pyfunction!(all_to_allv, m)?)?;
    m.add_function(wrap_pyfunction!(send_recv, m)?)?;
    m.add_function(wrap_pyfunction!(prepare, m)?)?;
    Ok(())
}

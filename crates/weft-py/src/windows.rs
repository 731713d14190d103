//! Windows of `weft._weft`: a buffer every rank registers collectively (NCCL's symmetric
//! window, `ncclCommWindowRegister`), after which any call whose output lies inside it writes
//! straight into the peers' buffers, eager or captured, and an AllReduce whose input lies in
//! one too reads the peers' inputs in place. The Python package (`Communicator.register_window`)
//! keeps the registered tensor referenced until `deregister_window` returns, which is what keeps
//! its memory allocated while the peers map it.

// The closures pass on weft_coll's `CollError` by value, as in `collectives.rs`; it becomes a
// Python exception once, after the GIL is back.
#![allow(clippy::result_large_err)]

use pyo3::prelude::*;
use weft::coll::CollError;
use weft::gpu::DevicePtr;

use crate::communicator::Communicator;
use crate::error::coll_to_py;

/// A registered window (private: `weft.Communicator.register_window` wraps it).
#[pyclass(module = "weft._weft", frozen)]
pub(crate) struct Window(weft::Window);

#[pymethods]
impl Window {
    /// The first byte of this rank's buffer.
    #[getter]
    fn base(&self) -> DevicePtr {
        self.0.base
    }

    /// Bytes of the window (the same on every rank).
    #[getter]
    fn nbytes(&self) -> u64 {
        self.0.len
    }

    fn __repr__(&self) -> String {
        format!("Window(base={:#x}, nbytes={})", self.0.base, self.0.len)
    }
}

/// Registers `[base, base + nbytes)` of this GPU as a window: collective (every rank registers
/// a buffer of the same length, in the same order), blocking until every rank has mapped every
/// peer's buffer. The buffer must lie in one `cudaMalloc` / `cuMemAlloc` allocation (or VMM
/// memory exportable as a file descriptor), 16-byte aligned.
#[pyfunction]
fn register_window(comm: &Bound<'_, Communicator>, base: DevicePtr, nbytes: usize) -> PyResult<Window> {
    let coll = &comm.get().coll;
    // SAFETY: the Python layer keeps the registered tensor referenced by its communicator until
    // `deregister_window` has returned on this rank, so the memory stays allocated while
    // registered; weft checks the range lies in one allocation of this GPU.
    comm.py().detach(|| unsafe { coll.raw().register_window(base, nbytes) }).map(Window).map_err(coll_to_py)
}

/// Deregisters `window`: waits for this GPU's work, then the collective deregistration (a
/// barrier between the ranks, then each rank unmaps its peers' buffers).
#[pyfunction]
fn deregister_window(comm: &Bound<'_, Communicator>, window: &Bound<'_, Window>) -> PyResult<()> {
    let coll = &comm.get().coll;
    let window = window.get().0;
    comm.py()
        .detach(|| {
            let device = coll.communicator().device();
            device.synchronize().map_err(|source| CollError::Gpu { rank: coll.communicator().rank(), source })?;
            // SAFETY: every call this rank enqueued has finished (the synchronisation above),
            // and every rank synchronises before it enters the deregistration's exchange, which
            // is a barrier: no kernel uses the window's mappings when they are dropped.
            unsafe { coll.raw().deregister_window(&window) }
        })
        .map_err(coll_to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Window>()?;
    m.add_function(wrap_pyfunction!(register_window, m)?)?;
    m.add_function(wrap_pyfunction!(deregister_window, m)?)?;
    Ok(())
}

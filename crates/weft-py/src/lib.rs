//! # weft-py — the native module of the `weft` Python package (`weft._weft`)
//!
//! **Owns:** argument marshalling between Python and weft's Rust API: the communicator's
//! construction (torchrun's environment, or a unique id a Python process group exchanged), the
//! collective calls on raw device pointers, element counts, type names and CUDA stream handles,
//! window registration, and the translation of weft's errors into Python exceptions carrying
//! weft's messages.
//!
//! **Must not:** hold logic of its own. What a tensor is (torch, DLPack, CUDA array interface),
//! which argument is wrong, how torch.distributed's names map to weft's: all of it lives in the
//! Python package (`python/weft/`), where it is tested without a GPU. In particular this module
//! never imports torch. Calls release the GIL while weft works (kernel compilation on first use,
//! the host agreement of a captured call).
//!
//! **Depends on:** `weft` (the facade) and `pyo3` (abi3, Python 3.11 and later).
//!
//! The collective bindings are one module ([`collectives`]) over `weft_coll::Collectives`'
//! raw-pointer calls, so that re-pointing them at another layer touches one file; the EP
//! bindings (`ep_*`, for `weft.ep`) are one module ([`ep`]) over weft-ep's raw layer.

mod collectives;
mod communicator;
mod ep;
mod error;
mod windows;

use pyo3::prelude::*;

/// `weft._weft`: the classes, functions and exceptions the Python package builds on.
#[pymodule]
fn _weft(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    error::register(m)?;
    communicator::register(m)?;
    collectives::register(m)?;
    windows::register(m)?;
    ep::register(m)?;
    Ok(())
}

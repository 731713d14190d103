//! weft's errors as Python exceptions: `WeftError` (a `RuntimeError`) for every failure, and
//! `InvalidArgumentError` (also a `ValueError`) for the arguments weft itself refused. The
//! message is weft's own (`Display`), which names the rank.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyTuple, PyType};

create_exception!(weft._weft, WeftError, PyRuntimeError, "A weft call failed; the message is weft's.");

/// `InvalidArgumentError`, raised for arguments weft refused: a `WeftError` and a `ValueError`.
/// Its class is made at module set-up, since `create_exception!` takes a single base.
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("WeftError", py.get_type::<WeftError>())?;
    let bases = PyTuple::new(py, [py.get_type::<WeftError>(), py.get_type::<PyValueError>()])?;
    let builtins = py.import("builtins")?;
    let doc = "weft refused an argument (a WeftError and a ValueError); the message is weft's.";
    let class = builtins.getattr("type")?.call1((
        "InvalidArgumentError",
        bases,
        [("__module__", "weft._weft"), ("__doc__", doc)].into_py_dict(py)?,
    ))?;
    let class = class.cast_into::<PyType>()?;
    m.add("InvalidArgumentError", &class)?;
    // Set once per process: a module initialised again keeps raising the first class.
    let _ = INVALID_ARGUMENT.set(py, class.unbind());
    Ok(())
}

/// A Python exception for one of weft's errors.
pub(crate) fn to_py(error: impl std::fmt::Display) -> PyErr {
    WeftError::new_err(error.to_string())
}

/// A Python exception for a collective's error: weft's refused arguments become
/// `InvalidArgumentError`, everything else `WeftError`.
pub(crate) fn coll_to_py(error: weft::coll::CollError) -> PyErr {
    if let weft::coll::CollError::InvalidArgument { .. } | weft::coll::CollError::Argument { .. } = error {
        return invalid_argument(error.to_string());
    }
    to_py(error)
}

/// A Python exception for an EP call's error, sorted as [`coll_to_py`] sorts.
pub(crate) fn ep_to_py(error: weft::ep::EpError) -> PyErr {
    if let weft::ep::EpError::InvalidArgument { .. } = error {
        return invalid_argument(error.to_string());
    }
    to_py(error)
}

fn invalid_argument(message: String) -> PyErr {
    Python::attach(|py| match INVALID_ARGUMENT.get(py) {
        Some(class) => PyErr::from_type(class.bind(py).clone(), message),
        None => WeftError::new_err(message),
    })
}

//! `weft._weft.Communicator`: one rank's communicator and its collectives, made from torchrun's
//! environment or from a unique id (bytes) the ranks exchanged some other way (the Python
//! package uses a `torch.distributed` process group), and `weft._weft.unique_id`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use weft::bootstrap::{Bootstrap, TcpBootstrap, UniqueId};
use weft::gpu::Device;
use weft::{CollConfig, Collectives, Communicator as Comm, Env};

use crate::error::to_py;

/// One rank of a weft communicator with its collectives (private: use `weft.Communicator`).
#[pyclass(module = "weft._weft", frozen)]
pub(crate) struct Communicator {
    pub(crate) coll: Collectives,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator").field("coll", &self.coll).finish()
    }
}

impl Communicator {
    /// The communicator of `bootstrap`'s rank on GPU `device`, with weft's configuration from the
    /// environment. Collective: every rank calls it.
    fn build(bootstrap: Arc<dyn Bootstrap>, device: usize) -> Result<Self, String> {
        let env = Env::from_process().map_err(|e| e.to_string())?;
        let device = Device::new(device).map_err(|e| e.to_string())?;
        let comm = Comm::new(bootstrap, device, env.clone()).map_err(|e| e.to_string())?;
        let config = CollConfig::from_env(&env).map_err(|e| e.to_string())?;
        let coll = Collectives::new(&comm, config).map_err(|e| e.to_string())?;
        Ok(Self { coll })
    }
}

#[pymethods]
impl Communicator {
    /// Joins the job torchrun describes (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`;
    /// weft-bootstrap's rendezvous) on GPU `device`.
    #[staticmethod]
    fn from_torchrun(py: Python<'_>, device: usize) -> PyResult<Self> {
        py.detach(|| {
            let bootstrap = TcpBootstrap::builder().from_env().map_err(|e| e.to_string())?;
            Self::build(Arc::new(bootstrap), device)
        })
        .map_err(to_py)
    }

    /// Joins the job of unique id `id` (bytes of `unique_id`) as `rank` of `world_size`, on GPU
    /// `device`. The process that made the id must host rank 0.
    #[staticmethod]
    fn from_unique_id(py: Python<'_>, id: &[u8], rank: usize, world_size: usize, device: usize) -> PyResult<Self> {
        let id = UniqueId::from_bytes(id).map_err(|e| PyValueError::new_err(format!("id: {e}")))?;
        py.detach(|| {
            let bootstrap = TcpBootstrap::builder().connect(&id, rank, world_size).map_err(|e| e.to_string())?;
            Self::build(Arc::new(bootstrap), device)
        })
        .map_err(to_py)
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.coll.communicator().rank()
    }

    /// Ranks of the communicator.
    #[getter]
    fn world_size(&self) -> usize {
        self.coll.communicator().world_size()
    }

    /// The CUDA ordinal of this rank's GPU.
    #[getter]
    fn device(&self) -> usize {
        self.coll.communicator().device().ordinal()
    }

    /// Number of (possibly virtual) nodes the ranks are in: hosts, or with
    /// `WEFT_RANKS_PER_NODE` virtual nodes of that many ranks (the communicator's topology).
    #[getter]
    fn node_count(&self) -> usize {
        self.coll.communicator().topology().node_count()
    }

    /// Ranks per virtual node (`WEFT_RANKS_PER_NODE`), or `None` when a node is a host.
    #[getter]
    fn ranks_per_node(&self) -> Option<usize> {
        self.coll.communicator().topology().ranks_per_node()
    }

    fn __repr__(&self) -> String {
        format!("Communicator(rank={}, world_size={}, device={})", self.rank(), self.world_size(), self.device())
    }
}

/// A new unique id (bytes) whose rendezvous root listens on `host` (an IP address; port 0 picks
/// a free one). The calling process must host rank 0 of the communicator made from it.
#[pyfunction]
fn unique_id<'py>(py: Python<'py>, host: &str) -> PyResult<Bound<'py, PyBytes>> {
    let ip: IpAddr = host.parse().map_err(|e| PyValueError::new_err(format!("host {host:?}: {e}")))?;
    let id = UniqueId::new(SocketAddr::new(ip, 0)).map_err(to_py)?;
    Ok(PyBytes::new(py, &id.to_bytes()))
}

/// `WEFT_RANKS_PER_NODE` as weft's configuration reads it from this process's environment
/// (`None`: unset, a node is a host): what a communicator made now would split its hosts by.
#[pyfunction]
fn env_ranks_per_node() -> PyResult<Option<usize>> {
    Ok(Env::from_process().map_err(to_py)?.ranks_per_node)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Communicator>()?;
    m.add_function(wrap_pyfunction!(unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(env_ranks_per_node, m)?)?;
    Ok(())
}

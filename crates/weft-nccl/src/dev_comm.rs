//! weft's device communicators behind `ncclDevCommCreate` and `ncclDevCommDestroy`: each one a
//! `weft_gin::DevComm` on the communicator's weft side, with its `DevCommHandle` copied to
//! device memory, kept by the communicator until destroyed (or until the communicator is).
//!
//! The `ncclDevComm` the application gets is NCCL 2.28.9's struct. It holds what NCCL documents
//! as stable (`rank`, `nRanks`, `lsaRank`, `lsaSize`, `ginContextCount`), the reciprocals NCCL's
//! team helpers divide by, and in [`WeftPart`] the magic, the id and the device address of the
//! handle, which `weft::gin_handle(devComm)` (device/include/weft/gin.cuh) reads in a kernel.
//! Every pointer NCCL's own device code follows is null, so a kernel that uses NCCL's device
//! functions on it faults at once instead of reading weft's memory as NCCL's.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use weft_core::Communicator;
use weft_gin::DevComm;
use weft_gpu::DeviceMemory;
use weft_types::{DevCommHandle, NCCL_DEV_COMM_WEFT_MAGIC};

use crate::comm::lock;
use crate::dev_requirements::DevCommPlan;
use crate::device_ffi::{WeftPart, idiv_rcp32, ncclDevComm_t};
use crate::error::NcclError;

/// The next device communicator's id: unique in the process and never reused, so a stale copy
/// of a destroyed `ncclDevComm` never names a live one.
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One device communicator.
#[derive(Debug)]
struct Entry {
    /// The handle in device memory (what [`WeftPart::handle`] points to).
    handle: Arc<DeviceMemory>,
    /// Kept for what it holds (the heap, mappings, channels): dropping it frees them.
    _dev_comm: DevComm,
}

/// The device communicators of one weft communicator, by id.
#[derive(Debug, Default)]
pub struct DevComms(Mutex<HashMap<u32, Entry>>);

impl DevComms {
    /// Makes the device communicator of `plan` on `comm` (collective: every rank calls it with
    /// the same plan) and returns the `ncclDevComm` that describes it.
    pub fn create(&self, comm: &Communicator, plan: &DevCommPlan) -> Result<ncclDevComm_t, NcclError> {
        let dev_comm = DevComm::new(comm, &plan.requirements)?;
        let handle = dev_comm.handle();
        let memory = comm.alloc(size_of::<DevCommHandle>())?;
        memory.write_pod(0, std::slice::from_ref(&handle))?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let lsa = &dev_comm.teams().lsa;
        let int = |n: usize| c_int::try_from(n).unwrap_or(c_int::MAX);
        let out = ncclDevComm_t {
            rank: int(comm.rank()),
            nRanks: int(comm.world_size()),
            nRanks_rcp32: idiv_rcp32(handle.world),
            lsaRank: int(lsa.rank()),
            lsaSize: int(lsa.size()),
            lsaSize_rcp32: idiv_rcp32(handle.lsa_size),
            // weft's Gin is per thread and takes no context index: one context.
            ginContextCount: 1,
            weft: WeftPart { magic: NCCL_DEV_COMM_WEFT_MAGIC, id, handle: memory.ptr() },
            ..Default::default()
        };
        lock(&self.0).insert(id, Entry { handle: memory, _dev_comm: dev_comm });
        Ok(out)
    }

    /// `ncclInvalidArgument` unless `part` names a live device communicator of this communicator.
    pub fn check(&self, part: WeftPart) -> Result<(), NcclError> {
        match lock(&self.0).get(&part.id) {
            Some(e) if e.handle.ptr() == part.handle => Ok(()),
            _ => Err(NcclError::invalid_argument(format!(
                "devComm {} is not a live device communicator of this communicator (destroyed already, made on \
                 another communicator, or a corrupt copy)",
                part.id
            ))),
        }
    }

    /// Destroys device communicator `part` (collective): after a barrier of the ranks (every
    /// rank's kernels using it have ended, as NCCL requires before the call), its memory is
    /// unmapped and freed. If the barrier fails it stays, and is freed with the communicator.
    pub fn destroy(&self, comm: &Communicator, part: WeftPart) -> Result<(), NcclError> {
        self.check(part)?;
        comm.barrier()?;
        let entry = lock(&self.0).remove(&part.id);
        drop(entry);
        Ok(())
    }

    /// Live device communicators (tests, logs).
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// Whether none is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

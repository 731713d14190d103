//! A start line on the GPUs for timed work. A host barrier releases the ranks' threads or
//! processes tens of microseconds apart, and a trial that starts its events right after it
//! times that skew too: the early rank's first call waits in its kernel for the late one. With
//! a trial of 60 calls of 3.5 µs, a 30 µs skew adds 0.5 µs to every call, which is the spread
//! the trials of the small rows showed. So before its start event, every rank enqueues one
//! untimed AllReduce of one element: it ends on every GPU within one NVLink hop of the others,
//! whenever the hosts got there, and the timed work is already queued behind it.
//! `WEFT_BENCH_START_LINE=0` leaves it out, to measure what it removes.

use std::cell::RefCell;

use weft_coll::{CollConfig, Collectives};
use weft_core::Communicator;
use weft_core::env::vars;
use weft_gpu::{DeviceBuffer, Stream};
use weft_types::{DataType, ReduceOp};

type BoxError = Box<dyn std::error::Error>;

/// The collective every rank enqueues before a timed bracket. Its own [`Collectives`], so it
/// shows in neither the traces nor the path counts of the collectives it times.
pub(crate) struct StartLine {
    /// None when `WEFT_BENCH_START_LINE=0`.
    line: Option<(Collectives, RefCell<DeviceBuffer<f32>>)>,
}

impl StartLine {
    /// A start line among `comm`'s ranks, with its kernel compiled up front (never inside a
    /// timing or a capture). Every rank makes one.
    pub(crate) fn new(comm: &Communicator) -> Result<Self, BoxError> {
        let variable = &vars::WEFT_BENCH_START_LINE;
        let on = match comm.env().var(variable).map(str::trim) {
            None | Some("1") => true,
            Some("0") => false,
            Some(v) => return Err(format!("{}={v:?}: expected 0 or 1", variable.name).into()),
        };
        if !on {
            return Ok(Self { line: None });
        }
        let coll = Collectives::new(comm, CollConfig::from_env(comm.env())?)?;
        coll.prepare(DataType::F32, ReduceOp::Sum)?;
        Ok(Self { line: Some((coll, RefCell::new(DeviceBuffer::new(comm.device(), 1)?))) })
    }

    /// Enqueues the start line on `stream`: what follows on it starts when every rank's
    /// start line has.
    pub(crate) fn enqueue(&self, stream: &Stream) -> Result<(), BoxError> {
        if let Some((coll, word)) = &self.line {
            coll.all_reduce_in_place(&mut word.borrow_mut().as_mut_slice(), ReduceOp::Sum, stream)?;
        }
        Ok(())
    }
}

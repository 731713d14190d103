//! The safe calls of the NCCL baseline ([`NcclComm::run`]): each collective as nccl-tests runs
//! it, on typed views whose lengths are checked with the typed collective API's rules
//! (`lengths.rs`) and which the stream keeps alive until its work has run, as
//! `typed.rs` explains for weft's own calls.

use weft_gpu::{DeviceElement, DevicePtr, DeviceSlice, DeviceSliceMut, Stream};
use weft_types::ReduceOp;

use crate::algorithm::Collective;
use crate::lengths::Lengths;
use crate::nccl::{NcclComm, NcclLibError};

/// The buffers of a baseline call.
#[derive(Debug)]
pub enum NcclBuffers<'a, T: DeviceElement> {
    /// `send` into `recv`.
    Separate {
        /// The input.
        send: DeviceSlice<'a, T>,
        /// The output.
        recv: DeviceSliceMut<'a, T>,
    },
    /// One buffer in nccl-tests' in-place layout: AllGather's input is block `rank` of it,
    /// ReduceScatter's output block `rank`; the others read and write the whole buffer.
    InPlace(DeviceSliceMut<'a, T>),
}

/// What a baseline call runs, on which rank of how many.
#[derive(Clone, Copy, Debug)]
pub struct NcclCall {
    /// The collective; SendRecv sends to rank + 1 and receives from rank - 1 (nccl-tests').
    pub collective: Collective,
    /// The operator of the reducing collectives (a built-in NCCL one).
    pub op: ReduceOp,
    /// The root of Broadcast and Reduce.
    pub root: usize,
    /// This rank.
    pub rank: usize,
    /// The communicator's ranks.
    pub ranks: usize,
}

impl NcclComm<'_> {
    /// Runs `call` on `buffers`, enqueued on `stream`. Every rank makes the matching call.
    pub fn run<T: DeviceElement>(
        &self,
        call: &NcclCall,
        buffers: NcclBuffers<'_, T>,
        stream: &Stream,
    ) -> Result<(), NcclLibError> {
        let (send, recv, count) = addresses(call, &buffers).map_err(Box::new)?;
        let NcclCall { collective, op, root, rank, ranks } = *call;
        let dtype = T::DTYPE;
        let (next, prev) = ((rank + 1) % ranks, (rank + ranks - 1) % ranks);
        // SAFETY: `addresses` derived the count from the views and checked their lengths with
        // the typed API's rules, so every range lies inside a live view; the stream keeps the
        // views alive until the work has run (retained below, after enqueuing).
        let result = unsafe {
            match collective {
                Collective::AllReduce => self.all_reduce(send, recv, count, dtype, op, stream),
                Collective::AllGather => self.all_gather(send, recv, count, dtype, stream),
                Collective::ReduceScatter => self.reduce_scatter(send, recv, count, dtype, op, stream),
                Collective::AllToAll => self.all_to_all(send, recv, count, dtype, ranks, stream),
                Collective::Broadcast => self.broadcast(send, recv, count, dtype, root, stream),
                Collective::Reduce => self.reduce(send, recv, count, dtype, op, root, stream),
                Collective::SendRecv => self.nccl().group(|| {
                    self.send(send, count, dtype, next, stream)?;
                    self.recv(recv, count, dtype, prev, stream)
                }),
            }
        };
        match &buffers {
            NcclBuffers::Separate { send, recv } => {
                send.retain_on(stream);
                recv.retain_on(stream);
            }
            NcclBuffers::InPlace(buffer) => buffer.retain_on(stream),
        }
        result
    }
}

/// The send and receive addresses and the count of `call` on `buffers`, the lengths checked.
fn addresses<T: DeviceElement>(
    call: &NcclCall,
    buffers: &NcclBuffers<'_, T>,
) -> Result<(DevicePtr, DevicePtr, usize), crate::CollError> {
    let lengths = Lengths { rank: call.rank, ranks: call.ranks };
    let size = size_of::<T>() as u64;
    Ok(match buffers {
        NcclBuffers::Separate { send, recv } => {
            let (s, r) = (send.len(), recv.len());
            let count = match call.collective {
                Collective::AllGather => lengths.all_gather(s, r)?,
                Collective::ReduceScatter => lengths.reduce_scatter(s, r)?,
                Collective::AllToAll => lengths.all_to_all(s, r)?,
                _ => lengths.same(s, r)?,
            };
            (send.ptr(), recv.ptr(), count)
        }
        NcclBuffers::InPlace(buffer) => {
            let (base, len) = (buffer.ptr(), buffer.len());
            let own = |count: usize| base + lengths.own_block(count) as u64 * size;
            match call.collective {
                Collective::AllGather => {
                    let count = lengths.in_place_blocks(len)?;
                    (own(count), base, count)
                }
                Collective::ReduceScatter => {
                    let count = lengths.in_place_blocks(len)?;
                    (base, own(count), count)
                }
                Collective::AllToAll => (base, base, lengths.in_place_blocks(len)?),
                _ => (base, base, len),
            }
        }
    })
}

//! One rank's harness, shared by `weft bench`, `weft tune` and the collective matrix of
//! `weft selftest`: the communicator, stream and two buffers of a rank ([`Rank`]), its timing of
//! a call, one row's call in weft and in NCCL ([`Call`]), and the element check of a call
//! against the host reference ([`check`]).

use std::sync::Arc;

use weft_bootstrap::Bootstrap;
use weft_coll::nccl::NcclComm;
use weft_coll::{Algorithm, Collectives, P2pKind, P2pOp, Reduction};
use weft_core::Communicator;
use weft_gpu::{AllocKind, DeviceMemory, DevicePtr, Event, Stream};
use weft_types::DataType;

use super::data::Reference;
use super::{Collective, NcclTests, ROOT, Shape};

type BoxError = Box<dyn std::error::Error>;

/// Byte written over outputs before a checked call, so that an element the call never writes
/// cannot pass as right (the graph replays use two others).
const POISON: u8 = 0x7f;

/// Calls per timed batch: enough to dwarf launch and event noise, few for huge messages.
pub(crate) fn calls_for(bytes: usize) -> u32 {
    match bytes {
        b if b >= 256 << 20 => 5,
        b if b >= 16 << 20 => 10,
        _ => 20,
    }
}

/// One rank's communicator, stream and the two buffers every row uses.
pub(crate) struct Rank {
    pub(crate) comm: Communicator,
    pub(crate) bootstrap: Arc<dyn Bootstrap>,
    pub(crate) stream: Stream,
    pub(crate) send: DeviceMemory,
    pub(crate) recv: DeviceMemory,
}

impl Rank {
    /// A rank of `comm` with a stream and two buffers of `bytes` each.
    pub(crate) fn new(comm: &Communicator, bytes: usize) -> Result<Self, BoxError> {
        let device = comm.device();
        Ok(Self {
            stream: Stream::new(device)?,
            send: DeviceMemory::alloc(device, bytes, AllocKind::Legacy)?,
            recv: DeviceMemory::alloc(device, bytes, AllocKind::Legacy)?,
            bootstrap: Arc::clone(comm.bootstrap()),
            comm: comm.clone(),
        })
    }

    pub(crate) fn barrier(&self) -> Result<(), BoxError> {
        Ok(self.comm.barrier()?)
    }

    /// Waits for the stream, then fails if a kernel recorded a failure (a timed-out wait
    /// makes the kernels that share the record return early, so its times would be bogus).
    pub(crate) fn idle(&self) -> Result<(), BoxError> {
        self.stream.wait_idle(std::time::Duration::from_secs(120), "benchmark")?;
        Ok(self.comm.check_device()?)
    }

    /// Microseconds per call of `call`, eager or captured in a CUDA graph.
    pub(crate) fn time(
        &self,
        graph: bool,
        bytes: usize,
        call: &dyn Fn() -> Result<(), BoxError>,
    ) -> Result<f64, BoxError> {
        let device = self.comm.device();
        let calls = calls_for(bytes);
        let (start, end) = (Event::new(device)?, Event::new(device)?);
        if graph {
            self.stream.begin_capture()?;
            let mut captured = Ok(());
            for _ in 0..calls {
                captured = call();
                if captured.is_err() {
                    break;
                }
            }
            let g = self.stream.end_capture()?;
            captured?;
            g.launch(&self.stream)?;
            self.idle()?;
            self.barrier()?;
            let replays = 3;
            start.record(&self.stream)?;
            for _ in 0..replays {
                g.launch(&self.stream)?;
            }
            end.record(&self.stream)?;
            self.idle()?;
            Ok(f64::from(start.elapsed_ms(&end)?) * 1e3 / f64::from(replays * calls))
        } else {
            for _ in 0..3 {
                call()?;
            }
            self.idle()?;
            self.barrier()?;
            start.record(&self.stream)?;
            for _ in 0..calls {
                call()?;
            }
            end.record(&self.stream)?;
            self.idle()?;
            Ok(f64::from(start.elapsed_ms(&end)?) * 1e3 / f64::from(calls))
        }
    }
}

/// One row's call, in weft and in NCCL, from a send pointer to a receive pointer.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) collective: Collective,
    pub(crate) shape: Shape,
    pub(crate) dtype: DataType,
    /// The operator (PreMulSum with its scalar).
    pub(crate) op: Reduction,
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
    pub(crate) stream: &'a Stream,
}

impl Call<'_> {
    /// The rank SendRecv sends to and the one it receives from.
    fn neighbours(&self) -> (usize, usize) {
        ((self.rank + 1) % self.ranks, (self.rank + self.ranks - 1) % self.ranks)
    }

    /// weft's call; returns the algorithm it ran.
    ///
    /// # Safety
    /// `send` and `recv` must be this rank's buffers (or the collective's in-place layout inside
    /// one of them) for the row's shape, valid until the stream is idle, and every rank must
    /// make the same call.
    pub(crate) unsafe fn weft(
        &self,
        coll: &Collectives,
        send: DevicePtr,
        recv: DevicePtr,
    ) -> Result<Algorithm, BoxError> {
        let Call { shape: Shape { count, .. }, dtype, op, stream, .. } = *self;
        let ((next, prev), root) = (self.neighbours(), ROOT as usize);
        let p2p = [
            P2pOp { kind: P2pKind::Send, peer: next, ptr: send, count, dtype },
            P2pOp { kind: P2pKind::Recv, peer: prev, ptr: recv, count, dtype },
        ];
        // SAFETY: the caller's contract; each call's count is the one the shape was made for.
        let algorithm = unsafe {
            match self.collective {
                Collective::AllReduce => coll.all_reduce(send, recv, count, dtype, op, stream),
                Collective::AllGather => coll.all_gather(send, recv, count, dtype, stream),
                Collective::ReduceScatter => coll.reduce_scatter(send, recv, count, dtype, op, stream),
                Collective::AllToAll => coll.all_to_all(send, recv, count, dtype, stream),
                Collective::Broadcast => coll.broadcast(send, recv, count, dtype, root, stream),
                Collective::Reduce => coll.reduce(send, recv, count, dtype, op, root, stream),
                Collective::SendRecv => coll.send_recv(&p2p, stream),
            }
        }?;
        Ok(algorithm)
    }

    /// NCCL's call (AllToAll and SendRecv as groups of sends and receives, as nccl-tests).
    ///
    /// # Safety
    /// As for [`Call::weft`].
    pub(crate) unsafe fn nccl(&self, nc: &NcclComm<'_>, send: DevicePtr, recv: DevicePtr) -> Result<(), BoxError> {
        let Call { shape: Shape { count, .. }, dtype, op, ranks, stream, .. } = *self;
        let ((next, prev), root) = (self.neighbours(), ROOT as usize);
        // SAFETY: the caller's contract; each call's count is the one the shape was made for.
        unsafe {
            match self.collective {
                Collective::AllReduce => nc.all_reduce(send, recv, count, dtype, op.op(), stream),
                Collective::AllGather => nc.all_gather(send, recv, count, dtype, stream),
                Collective::ReduceScatter => nc.reduce_scatter(send, recv, count, dtype, op.op(), stream),
                Collective::AllToAll => nc.all_to_all(send, recv, count, dtype, ranks, stream),
                Collective::Broadcast => nc.broadcast(send, recv, count, dtype, root, stream),
                Collective::Reduce => nc.reduce(send, recv, count, dtype, op.op(), root, stream),
                Collective::SendRecv => nc.nccl().group(|| {
                    nc.send(send, count, dtype, next, stream)?;
                    nc.recv(recv, count, dtype, prev, stream)
                }),
            }
        }?;
        Ok(())
    }
}

/// The element check of one row's `run` (weft's or NCCL's call from a send to a receive
/// pointer): out of place, in place, and (with `graph`) two replays of a captured call out of
/// place and two in place, every output poisoned first; each in-place replay gets inputs of
/// its own (a seed per replay), so a replay that reads anything the previous one left (a
/// staged tail, a scratch slot) gets the previous inputs' result and fails. Returns the wrong
/// elements and whether every rank's output is bitwise the same where it must be.
pub(crate) fn check(
    me: &Rank,
    call: &Call<'_>,
    run: &dyn Fn(DevicePtr, DevicePtr) -> Result<(), BoxError>,
    reference: &Reference,
    graph: bool,
) -> Result<(u64, bool), BoxError> {
    let (c, shape, rank) = (call.collective, call.shape, call.rank as u32);
    let size = call.dtype.size();
    let recv_bytes = shape.recv_count * size;
    let input = reference.input(rank, shape.send_count);
    let mut result = vec![0u8; recv_bytes];
    let mut wrong = 0;
    // Waits for the call, reads this rank's output at `at` in the receive buffer and counts its
    // wrong elements; the closing barrier keeps every rank's buffers untouched until all ranks
    // are done with them.
    let mut finish = |at: usize, trial: &str, reference: &Reference| -> Result<(), BoxError> {
        me.idle()?;
        me.recv.read(at, &mut result)?;
        if c.has_output(rank) {
            let source = |i| c.source(&shape, rank, reference.ranks, i);
            let bad = reference.count_wrong(&result, source);
            if bad > 0 {
                // Where it went wrong is what a developer needs first.
                let first = result.chunks(size).enumerate().find(|(i, e)| !reference.element_ok(source(*i as u64), e));
                if let Some((i, e)) = first {
                    let want = reference.expected(source(i as u64));
                    eprintln!(
                        "rank {rank}: {c:?} {trial}: {bad} of {} elements wrong, first at {i}: {e:02x?}, want {want}",
                        shape.recv_count
                    );
                }
            }
            wrong += bad;
        }
        me.barrier()
    };
    let (send, recv) = (me.send.ptr(), me.recv.ptr());

    // Out of place.
    me.send.write(0, &input)?;
    me.recv.fill(0, recv_bytes, POISON)?;
    me.barrier()?;
    run(send, recv)?;
    finish(0, "out of place", reference)?;

    // In place: input and output inside the receive buffer, where nccl-tests puts them (every
    // collective has an in-place form; AllToAll and SendRecv in place stage their input).
    {
        let (input_at, output_at) = c.in_place_offsets(&shape, size, rank);
        me.recv.fill(0, shape.bytes, POISON)?;
        me.recv.write(input_at, &input)?;
        me.barrier()?;
        run(recv + input_at as u64, recv + output_at as u64)?;
        finish(output_at, "in place", reference)?;
    }

    // Captured once, replayed twice, the output poisoned before each replay (send still holds
    // the input: nothing above wrote to it after the out-of-place call). Captured calls are
    // the ones that may write straight into the peers' registered outputs.
    if graph {
        me.stream.begin_capture()?;
        let captured = run(send, recv);
        let g = me.stream.end_capture()?;
        captured?;
        for poison in [0xa5u8, 0x5a] {
            me.recv.fill(0, recv_bytes, poison)?;
            me.barrier()?;
            g.launch(&me.stream)?;
            finish(0, "graph replay", reference)?;
        }
    }

    // In place, captured once and replayed twice: each replay finds fresh inputs (every rank
    // derives replay k's seed alike) and the rest of the buffer poisoned (the previous replay
    // overwrote the input with results).
    if graph {
        let (input_at, output_at) = c.in_place_offsets(&shape, size, rank);
        me.stream.begin_capture()?;
        let captured = run(recv + input_at as u64, recv + output_at as u64);
        let g = me.stream.end_capture()?;
        captured?;
        for (replay, poison) in [0xa5u8, 0x5a].into_iter().enumerate() {
            let fresh = reference.replay(replay as u32);
            me.recv.fill(0, shape.bytes, poison)?;
            me.recv.write(input_at, &fresh.input(rank, shape.send_count))?;
            me.barrier()?;
            g.launch(&me.stream)?;
            finish(output_at, "in-place graph replay", &fresh)?;
        }
    }

    let hashes = me.bootstrap.all_gather(&fnv(&result).to_le_bytes())?;
    let identical = !c.same_output_everywhere() || hashes.iter().all(|h| *h == hashes[0]);
    Ok((wrong, identical))
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A seed every rank shares, fresh for each row.
pub(crate) fn shared_seed(bootstrap: &dyn Bootstrap) -> Result<u32, BoxError> {
    let bytes = bootstrap.broadcast(0, Some(&rand::random::<u32>().to_le_bytes()))?;
    Ok(u32::from_le_bytes(bytes.get(..4).and_then(|b| b.try_into().ok()).ok_or("short seed")?))
}

//! One rank's harness, shared by `weft bench`, `weft tune` and the collective matrix of
//! `weft selftest`: the communicator, stream and two buffers of a rank ([`Rank`]), its timing of
//! calls (several in interleaved trials, see [`super::trials`]), one row's call in weft and in
//! NCCL ([`Call`]), and the element check of a call against the host reference ([`check`]).

use std::cell::RefCell;
use std::sync::Arc;

use weft_bootstrap::Bootstrap;
use weft_coll::nccl::{NcclBuffers, NcclCall, NcclComm};
use weft_coll::{Algorithm, Collectives, Operator, P2pGroup, Reduction};
use weft_core::Communicator;
use weft_gpu::{DeviceBuffer, DeviceElement, DeviceSlice, DeviceSliceMut, ElementFn, Event, Graph, Stream};
use weft_types::DataType;

use super::data::Reference;
use super::start_line::StartLine;
use super::trials::round_order;
use super::{Collective, NcclTests, Shape};

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

/// The two buffers every row uses, as bytes (the row's element type views them).
pub(crate) struct Buffers {
    pub(crate) send: DeviceBuffer<u8>,
    pub(crate) recv: DeviceBuffer<u8>,
}

/// Where a row's call reads and writes: `send` into `recv`, or in place inside `recv` where
/// nccl-tests puts the in-place layout of each collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    OutOfPlace,
    InPlace,
}

/// A row's call on the rank's buffers.
pub(crate) type Run<'a> = dyn Fn(&mut Buffers, Placement) -> Result<(), BoxError> + 'a;

/// One rank's communicator, stream and the two buffers every row uses.
pub(crate) struct Rank {
    pub(crate) comm: Communicator,
    pub(crate) bootstrap: Arc<dyn Bootstrap>,
    pub(crate) stream: Stream,
    /// Lent mutably to one call at a time (the checks and timings share the rank).
    pub(crate) buffers: RefCell<Buffers>,
}

impl Rank {
    /// A rank of `comm` with a stream and two buffers of `bytes` each.
    pub(crate) fn new(comm: &Communicator, bytes: usize) -> Result<Self, BoxError> {
        let device = comm.device();
        Ok(Self {
            stream: Stream::new(device)?,
            buffers: RefCell::new(Buffers {
                send: DeviceBuffer::new(device, bytes)?,
                recv: DeviceBuffer::new(device, bytes)?,
            }),
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

    /// Microseconds per call of `call` (on the rank's buffers), eager or captured in a CUDA
    /// graph: one warm-up and one trial, started on `start_line`.
    pub(crate) fn time(
        &self,
        graph: bool,
        bytes: usize,
        call: &CallFn<'_>,
        start_line: &StartLine,
    ) -> Result<f64, BoxError> {
        let work = self.timed_work(graph, bytes, call)?;
        self.launch(&work)?;
        self.trial(&work, start_line, &Event::new(self.comm.device())?, &Event::new(self.comm.device())?)
    }

    /// Each of `calls`' trials (µs per call, in the order they ran), eager or captured in CUDA
    /// graphs: every call's work is built once (each graph captured once), warmed up by one
    /// untimed launch, then timed in `trials` rounds of one trial each, the order alternating
    /// between rounds ([`round_order`]) so that drift lands on all of them alike. Every trial
    /// starts on `start_line`.
    pub(crate) fn time_interleaved(
        &self,
        graph: bool,
        bytes: usize,
        calls: &[&CallFn<'_>],
        trials: usize,
        start_line: &StartLine,
    ) -> Result<Vec<Vec<f64>>, BoxError> {
        let work = calls.iter().map(|call| self.timed_work(graph, bytes, *call)).collect::<Result<Vec<_>, _>>()?;
        for w in &work {
            self.launch(w)?;
        }
        let (start, end) = (Event::new(self.comm.device())?, Event::new(self.comm.device())?);
        let mut times = vec![Vec::with_capacity(trials); work.len()];
        for round in 0..trials {
            for i in round_order(round, work.len()) {
                times[i].push(self.trial(&work[i], start_line, &start, &end)?);
            }
        }
        Ok(times)
    }

    /// What one trial of `call` launches, built once: `calls_for(bytes)` calls captured in a
    /// CUDA graph, or the calls themselves.
    fn timed_work<'a>(&self, graph: bool, bytes: usize, call: &'a CallFn<'a>) -> Result<TimedWork<'a>, BoxError> {
        let calls = calls_for(bytes);
        if !graph {
            return Ok(TimedWork::Eager { call, calls });
        }
        self.stream.begin_capture()?;
        let mut captured = Ok(());
        for _ in 0..calls {
            captured = call(&mut self.buffers.borrow_mut());
            if captured.is_err() {
                break;
            }
        }
        let graph = self.stream.end_capture()?;
        captured?;
        Ok(TimedWork::Graph { graph, calls })
    }

    /// Launches `work`'s calls once: the graph once, or the calls one after another.
    fn launch(&self, work: &TimedWork<'_>) -> Result<(), BoxError> {
        match work {
            TimedWork::Graph { graph, .. } => graph.launch(&self.stream)?,
            TimedWork::Eager { call, calls } => {
                for _ in 0..*calls {
                    call(&mut self.buffers.borrow_mut())?;
                }
            }
        }
        Ok(())
    }

    /// One trial of `work`, once every rank is ready: µs per call of a bracket of `start` and
    /// `end` around three replays of the graph, or around the eager calls. The bracket opens
    /// behind `start_line`, so it holds no skew between the hosts' barrier exits.
    fn trial(&self, work: &TimedWork<'_>, start_line: &StartLine, start: &Event, end: &Event) -> Result<f64, BoxError> {
        self.idle()?;
        self.barrier()?;
        start_line.enqueue(&self.stream)?;
        start.record(&self.stream)?;
        let launches = match work {
            TimedWork::Graph { .. } => GRAPH_REPLAYS,
            TimedWork::Eager { .. } => 1,
        };
        for _ in 0..launches {
            self.launch(work)?;
        }
        end.record(&self.stream)?;
        self.idle()?;
        let calls = match work {
            TimedWork::Graph { calls, .. } | TimedWork::Eager { calls, .. } => *calls,
        };
        Ok(f64::from(start.elapsed_ms(end)?) * 1e3 / f64::from(launches * calls))
    }
}

/// Replays of a captured graph per timed trial.
const GRAPH_REPLAYS: u32 = 3;

/// A call on the rank's buffers, as the timing runs it.
pub(crate) type CallFn<'a> = dyn Fn(&mut Buffers) -> Result<(), BoxError> + 'a;

/// What one launch of a timed call runs: `calls` calls, captured in a graph or eager.
enum TimedWork<'a> {
    Graph { graph: Graph, calls: u32 },
    Eager { call: &'a CallFn<'a>, calls: u32 },
}

/// The operator of a row: a [`Reduction`] (PreMulSum with an immediate scalar), or PreMulSum
/// with the scalar in the first element of a device buffer.
#[derive(Clone, Copy)]
pub(crate) enum CallOp<'a> {
    Host(Reduction),
    DeviceScalar(&'a DeviceBuffer<u8>),
}

/// One row's call, in weft and in NCCL, on the rank's buffers.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) collective: Collective,
    /// Buffer lengths, count and root of the call.
    pub(crate) shape: Shape,
    pub(crate) dtype: DataType,
    /// The operator (PreMulSum with its scalar).
    pub(crate) op: CallOp<'a>,
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
    pub(crate) stream: &'a Stream,
}

impl Call<'_> {
    /// The rank SendRecv sends to and the one it receives from.
    fn neighbours(&self) -> (usize, usize) {
        ((self.rank + 1) % self.ranks, (self.rank + self.ranks - 1) % self.ranks)
    }

    /// weft's call on `buffers`, placed as `placement`; returns the algorithm it ran.
    pub(crate) fn weft(
        &self,
        coll: &Collectives,
        buffers: &mut Buffers,
        placement: Placement,
    ) -> Result<Algorithm, BoxError> {
        weft_gpu::with_element(self.dtype, WeftCall { call: self, coll, buffers, placement })
    }

    /// The operator as NCCL takes it (built-in operators only).
    fn nccl_op(&self) -> weft_types::ReduceOp {
        match self.op {
            CallOp::Host(reduction) => reduction.op(),
            CallOp::DeviceScalar(_) => weft_types::ReduceOp::PreMulSum,
        }
    }

    /// NCCL's call on `buffers`, placed as `placement` (AllToAll and SendRecv as groups of
    /// sends and receives, as nccl-tests).
    pub(crate) fn nccl(&self, nc: &NcclComm<'_>, buffers: &mut Buffers, placement: Placement) -> Result<(), BoxError> {
        weft_gpu::with_element(self.dtype, NcclRun { call: self, nc, buffers, placement })
    }
}

/// The views of a row's call for the element type `T`: the first elements of the rank's
/// buffers each side of the call needs, or in place the part of `recv` that holds both.
fn views<'b, T: DeviceElement>(
    shape: &Shape,
    buffers: &'b mut Buffers,
    placement: Placement,
) -> Result<NcclBuffers<'b, T>, BoxError> {
    let Shape { count, send_count, recv_count, .. } = *shape;
    Ok(match placement {
        Placement::OutOfPlace => NcclBuffers::Separate {
            send: elements(&buffers.send, send_count)?,
            recv: elements_mut(&mut buffers.recv, recv_count)?,
        },
        Placement::InPlace => {
            NcclBuffers::InPlace(elements_mut(&mut buffers.recv, send_count.max(recv_count).max(count))?)
        }
    })
}

/// NCCL's call of a row for the element type `T` (see [`Call::nccl`]).
struct NcclRun<'a, 'c> {
    call: &'a Call<'c>,
    nc: &'a NcclComm<'a>,
    buffers: &'a mut Buffers,
    placement: Placement,
}

impl ElementFn for NcclRun<'_, '_> {
    type Output = Result<(), BoxError>;

    fn call<T: DeviceElement>(self) -> Result<(), BoxError> {
        let NcclRun { call, nc, buffers, placement } = self;
        let what = NcclCall {
            collective: call.collective,
            op: call.nccl_op(),
            root: call.shape.root as usize,
            rank: call.rank,
            ranks: call.ranks,
        };
        Ok(nc.run(&what, views::<T>(&call.shape, buffers, placement)?, call.stream)?)
    }
}

/// weft's call of a row for the element type `T` (see [`Call::weft`]).
struct WeftCall<'a, 'c> {
    call: &'a Call<'c>,
    coll: &'a Collectives,
    buffers: &'a mut Buffers,
    placement: Placement,
}

impl ElementFn for WeftCall<'_, '_> {
    type Output = Result<Algorithm, BoxError>;

    fn call<T: DeviceElement>(self) -> Result<Algorithm, BoxError> {
        let WeftCall { call, coll, buffers, placement } = self;
        let stream = call.stream;
        let ((next, prev), root) = (call.neighbours(), call.shape.root as usize);
        let op: Operator<'_, T> = match call.op {
            CallOp::Host(reduction) => reduction.into(),
            CallOp::DeviceScalar(scalar) => Operator::PreMulSumOnDevice(elements(scalar, 1)?),
        };
        let algorithm = match views::<T>(&call.shape, buffers, placement)? {
            NcclBuffers::Separate { send, recv: mut out } => match call.collective {
                Collective::AllReduce => coll.all_reduce(&send, &mut out, op, stream),
                Collective::AllGather => coll.all_gather(&send, &mut out, stream),
                Collective::ReduceScatter => coll.reduce_scatter(&send, &mut out, op, stream),
                Collective::AllToAll => coll.all_to_all(&send, &mut out, stream),
                Collective::Broadcast => coll.broadcast(Some(&send), &mut out, root, stream),
                Collective::Reduce => coll.reduce(&send, Some(&mut out), op, root, stream),
                Collective::SendRecv => coll.send_recv(P2pGroup::new().send(next, send).recv(prev, out), stream),
            },
            NcclBuffers::InPlace(mut buffer) => match call.collective {
                Collective::AllReduce => coll.all_reduce_in_place(&mut buffer, op, stream),
                Collective::AllGather => coll.all_gather_in_place(&mut buffer, stream),
                Collective::ReduceScatter => coll.reduce_scatter_in_place(&mut buffer, op, stream),
                Collective::AllToAll => coll.all_to_all_in_place(&mut buffer, stream),
                Collective::Broadcast => coll.broadcast_in_place(&mut buffer, root, stream),
                Collective::Reduce => coll.reduce_in_place(&mut buffer, op, root, stream),
                Collective::SendRecv => coll.send_recv(P2pGroup::new().send_recv_in_place(next, prev, buffer), stream),
            },
        }?;
        Ok(algorithm)
    }
}

/// The first `count` elements of type `T` of a byte buffer.
fn elements<T: DeviceElement>(buffer: &DeviceBuffer<u8>, count: usize) -> Result<DeviceSlice<'_, T>, BoxError> {
    Ok(buffer.slice(..count * size_of::<T>())?.cast::<T>()?)
}

/// The first `count` elements of type `T` of a byte buffer, writable.
fn elements_mut<T: DeviceElement>(
    buffer: &mut DeviceBuffer<u8>,
    count: usize,
) -> Result<DeviceSliceMut<'_, T>, BoxError> {
    Ok(buffer.slice_mut(..count * size_of::<T>())?.cast_mut::<T>()?)
}

/// How a checked call is launched: once eagerly, or captured once in a CUDA graph and replayed
/// `replays` times, every replay's output checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Launch {
    Eager,
    Graph { replays: u32 },
}

/// What one checked call found: its wrong elements (over its launches), whether every rank's
/// output was bitwise the same where it must be, and the longest of its launches (from the
/// barrier every rank leaves together to the end of the stream's work).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checked {
    pub(crate) wrong: u64,
    pub(crate) identical: bool,
    pub(crate) slowest: std::time::Duration,
}

impl Checked {
    /// What no launch found yet.
    const CLEAN: Checked = Checked { wrong: 0, identical: true, slowest: std::time::Duration::ZERO };

    /// What `self` and `other` found together.
    fn and(self, other: Checked) -> Checked {
        Checked {
            wrong: self.wrong + other.wrong,
            identical: self.identical && other.identical,
            slowest: self.slowest.max(other.slowest),
        }
    }
}

/// The launches of a full check (a bench row's, the self-test's): out of place, in place, and
/// (with `graph`) two replays of a captured call out of place and two in place.
pub(crate) fn every_launch(graph: bool) -> Vec<(Placement, Launch)> {
    let mut launches = vec![(Placement::OutOfPlace, Launch::Eager), (Placement::InPlace, Launch::Eager)];
    if graph {
        // Captured calls are the ones that may write straight into the peers' registered outputs.
        let replays = Launch::Graph { replays: 2 };
        launches.extend([(Placement::OutOfPlace, replays), (Placement::InPlace, replays)]);
    }
    launches
}

/// The launches of [`every_launch`] that NCCL's `collective` defines: NCCL's AllToAll and
/// SendRecv are groups of sends and receives, and a group may not use a buffer it writes more
/// than once (NCCL's maintainers: in-place send/receive "is not actually a valid usage"), so
/// their in-place results are undefined, and wrong in practice from some size on (a 256 MB
/// in-place SendRecv on 2×H100 went wrong in NCCL, not in weft, which stages it).
pub(crate) fn nccl_launches(collective: Collective, launches: &[(Placement, Launch)]) -> Vec<(Placement, Launch)> {
    let grouped = matches!(collective, Collective::AllToAll | Collective::SendRecv);
    launches.iter().copied().filter(|&(placement, _)| !(grouped && placement == Placement::InPlace)).collect()
}

/// Poison bytes of consecutive graph replays (the eager call's is [`POISON`]).
const REPLAY_POISON: [u8; 2] = [0xa5, 0x5a];

/// The element check of one call on this rank: `run` (weft's or NCCL's call on the rank's
/// buffers) against `reference`.
pub(crate) struct Checking<'a> {
    pub(crate) me: &'a Rank,
    pub(crate) call: &'a Call<'a>,
    pub(crate) run: &'a Run<'a>,
    pub(crate) reference: &'a Reference,
}

impl Checking<'_> {
    /// The check at each of `launches` ([`Checking::placed`] each, in order), the findings
    /// together.
    pub(crate) fn launches(&self, launches: &[(Placement, Launch)]) -> Result<Checked, BoxError> {
        let mut found = Checked::CLEAN;
        for &(placement, launch) in launches {
            found = found.and(self.placed(placement, launch)?);
        }
        Ok(found)
    }

    /// The element check of `run` placed as `placement` and launched as `launch`, every output
    /// poisoned first. Out of place, the input goes into the send buffer once; in place, into the
    /// receive buffer where nccl-tests puts it, and each graph replay gets inputs of its own (a seed
    /// per replay, [`Reference::replay`]), so a replay that reads anything the previous one left (a
    /// staged tail, a scratch slot) gets the previous inputs' result and fails.
    fn placed(&self, placement: Placement, launch: Launch) -> Result<Checked, BoxError> {
        let Checking { me, call, run, reference } = *self;
        let (c, shape, rank) = (call.collective, call.shape, call.rank as u32);
        let size = call.dtype.size();
        let recv_bytes = shape.recv_count * size;
        let mut result = vec![0u8; recv_bytes];
        let (mut wrong, mut slowest) = (0, std::time::Duration::ZERO);
        let (input_at, output_at) = match placement {
            Placement::OutOfPlace => (0, 0),
            Placement::InPlace => c.in_place_offsets(&shape, size, rank),
        };
        let trial = match (placement, launch) {
            (Placement::OutOfPlace, Launch::Eager) => "out of place",
            (Placement::InPlace, Launch::Eager) => "in place",
            (Placement::OutOfPlace, Launch::Graph { .. }) => "graph replay",
            (Placement::InPlace, Launch::Graph { .. }) => "in-place graph replay",
        };
        let write = |buffer: &mut DeviceBuffer<u8>, at: usize, data: &[u8]| -> Result<(), BoxError> {
            Ok(buffer.slice_mut(at..at + data.len())?.copy_from_host(data)?)
        };
        // The poisoned output, and in place the input written where it goes (out of place, the send
        // buffer keeps the input written once).
        let prepare = |reference: &Reference, byte: u8| -> Result<(), BoxError> {
            let mut buffers = me.buffers.borrow_mut();
            match placement {
                Placement::OutOfPlace => buffers.recv.slice_mut(..recv_bytes)?.fill_bytes(byte)?,
                Placement::InPlace => {
                    buffers.recv.slice_mut(..shape.bytes)?.fill_bytes(byte)?;
                    write(&mut buffers.recv, input_at, &reference.input(rank, shape.send_count))?;
                }
            }
            Ok(())
        };
        // Waits for the launch, reads this rank's output and counts its wrong elements; the closing
        // barrier keeps every rank's buffers untouched until all ranks are done with them.
        let mut finish = |started: std::time::Instant, reference: &Reference| -> Result<(), BoxError> {
            me.idle()?;
            slowest = slowest.max(started.elapsed());
            me.buffers.borrow().recv.slice(output_at..output_at + result.len())?.copy_to_host(&mut result)?;
            if c.has_output(&shape, rank) {
                wrong = u64::saturating_add(wrong, count_wrong_reporting(call, reference, &result, trial));
            }
            me.barrier()
        };
        if placement == Placement::OutOfPlace {
            write(&mut me.buffers.borrow_mut().send, 0, &reference.input(rank, shape.send_count))?;
        }
        match launch {
            Launch::Eager => {
                prepare(reference, POISON)?;
                me.barrier()?;
                let started = std::time::Instant::now();
                run(&mut me.buffers.borrow_mut(), placement)?;
                finish(started, reference)?;
            }
            Launch::Graph { replays } => {
                me.stream.begin_capture()?;
                let captured = run(&mut me.buffers.borrow_mut(), placement);
                let g = me.stream.end_capture()?;
                captured?;
                for replay in 0..replays {
                    // Every rank derives replay k's inputs alike.
                    let fresh = match placement {
                        Placement::OutOfPlace => *reference,
                        Placement::InPlace => reference.replay(replay),
                    };
                    prepare(&fresh, REPLAY_POISON[replay as usize % REPLAY_POISON.len()])?;
                    me.barrier()?;
                    let started = std::time::Instant::now();
                    g.launch(&me.stream)?;
                    finish(started, &fresh)?;
                }
            }
        }
        let hashes = me.bootstrap.all_gather(&fnv(&result).to_le_bytes())?;
        let identical = !c.same_output_everywhere() || hashes.iter().all(|h| *h == hashes[0]);
        Ok(Checked { wrong, identical, slowest })
    }
}

/// The wrong elements of `rank`'s output `result` of `call` against `reference`; where there
/// are any, the first one goes to stderr (where it went wrong is what a developer needs first).
fn count_wrong_reporting(call: &Call<'_>, reference: &Reference, result: &[u8], trial: &str) -> u64 {
    let (c, shape, rank, size) = (call.collective, call.shape, call.rank as u32, call.dtype.size());
    let source = |i| c.source(&shape, rank, reference.ranks, i);
    let bad = reference.count_wrong(result, source);
    if bad > 0 {
        let first = result.chunks(size).enumerate().find(|(i, e)| !reference.element_ok(source(*i as u64), e));
        if let Some((i, e)) = first {
            let want = reference.expected(source(i as u64));
            eprintln!(
                "rank {rank}: {c:?} {trial}: {bad} of {} elements wrong, first at {i}: {e:02x?}, want {want}",
                shape.recv_count
            );
        }
    }
    bad
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A seed every rank shares, fresh for each row.
pub(crate) fn shared_seed(bootstrap: &dyn Bootstrap) -> Result<u32, BoxError> {
    let bytes = bootstrap.broadcast(0, Some(&rand::random::<u32>().to_le_bytes()))?;
    Ok(u32::from_le_bytes(bytes.get(..4).and_then(|b| b.try_into().ok()).ok_or("short seed")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_is_checked_in_place_only_where_nccl_defines_it() {
        let every = every_launch(true);
        for collective in Collective::ALL {
            let checked = nccl_launches(collective, &every);
            let in_place = checked.iter().filter(|(p, _)| *p == Placement::InPlace).count();
            let grouped = matches!(collective, Collective::AllToAll | Collective::SendRecv);
            assert_eq!(in_place, if grouped { 0 } else { 2 }, "{collective:?}");
            assert_eq!(checked.len(), if grouped { 2 } else { 4 }, "{collective:?}");
        }
    }
}

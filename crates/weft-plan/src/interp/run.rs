//! The interpreter's engine: shared memory, semaphores and one thread per thread block.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Element, InterpretError, RankBuffers, ReduceOp, Stall};
use crate::plan::{BufRef, Buffer, ExecutionPlan, Geometry, Link, Loc, Op, Site};

/// One element range of one buffer of one rank.
#[derive(Clone, Debug)]
struct Span {
    rank: usize,
    buffer: usize,
    range: Range<usize>,
}

/// Element ranges of equal length: the inputs folded into every output.
#[derive(Debug)]
struct Move {
    inputs: Vec<Span>,
    outputs: Vec<Span>,
}

/// An operation with everything resolved to element ranges: one move over its chunks, or one
/// per chunk for an operation on a part of each.
#[derive(Debug)]
struct Step {
    op: String,
    wait: Option<Link>,
    wait_tb: Option<(u32, u32)>,
    barrier: bool,
    moves: Vec<Move>,
    signal: Option<Link>,
    via: Option<Link>,
    flush: Option<Link>,
}

/// State shared by every thread of a run.
struct Shared {
    memory: Vec<[Vec<AtomicU64>; 3]>,
    /// (receiving rank, sending rank, channel, port) -> signals received.
    inbound: BTreeMap<(u32, u32, u32, bool), AtomicU64>,
    /// Per rank, per thread block: operations completed.
    progress: Vec<Vec<AtomicU32>>,
    /// Per rank: barrier arrivals.
    arrivals: Vec<AtomicU64>,
    abort: AtomicBool,
    op: ReduceOp,
    timeout: Duration,
}

enum Failure {
    TimedOut(Stall),
    Aborted(Stall),
    Internal(Site),
}

pub(super) fn run<T: Element>(
    plan: &ExecutionPlan,
    op: ReduceOp,
    timeout: Duration,
    buffers: &mut [RankBuffers<T>],
    element_count: usize,
) -> Result<(), InterpretError> {
    if matches!(op, ReduceOp::Avg | ReduceOp::PreMulSum) {
        return Err(InterpretError::UnsupportedOp(op));
    }
    plan.validate()?;
    let geometry = Geometry::new(plan, element_count)?;
    if buffers.len() != plan.ranks.len() {
        return Err(InterpretError::RankCount { expected: plan.ranks.len(), found: buffers.len() });
    }
    let mut memory = Vec::with_capacity(buffers.len());
    for (rank, bufs) in buffers.iter().enumerate() {
        let rank = rank as u32;
        let check = |buffer: Buffer, found: usize| {
            let expected = geometry.buffer_len(rank, buffer).unwrap_or(0);
            if expected == found { Ok(()) } else { Err(InterpretError::BufferLength { rank, buffer, expected, found }) }
        };
        check(Buffer::Input, bufs.input.len())?;
        check(Buffer::Output, bufs.output.len())?;
        let scratch = geometry.buffer_len(rank, Buffer::Scratch).unwrap_or(0);
        let atoms = |v: &[T]| v.iter().map(|x| AtomicU64::new(x.to_bits())).collect();
        memory.push([atoms(&bufs.input), atoms(&bufs.output), (0..scratch).map(|_| AtomicU64::new(0)).collect()]);
    }

    let mut inbound = BTreeMap::new();
    let mut programs: Vec<Vec<Vec<Step>>> = Vec::with_capacity(plan.ranks.len());
    for rank in &plan.ranks {
        let mut tbs = Vec::with_capacity(rank.threadblocks.len());
        for tb in &rank.threadblocks {
            let mut steps = Vec::with_capacity(tb.ops.len());
            for (i, op) in tb.ops.iter().enumerate() {
                let site = Site { rank: rank.rank, tb: tb.id, op: i as u32 };
                let step = resolve(&geometry, site, op)?;
                if let Some(l) = step.wait {
                    inbound.insert((rank.rank, l.peer, l.channel, l.port), AtomicU64::new(0));
                }
                if let Some(l) = step.signal {
                    inbound.insert((l.peer, rank.rank, l.channel, l.port), AtomicU64::new(0));
                }
                steps.push(step);
            }
            tbs.push(steps);
        }
        programs.push(tbs);
    }

    let shared = Shared {
        memory,
        inbound,
        progress: plan.ranks.iter().map(|r| r.threadblocks.iter().map(|_| AtomicU32::new(0)).collect()).collect(),
        arrivals: plan.ranks.iter().map(|_| AtomicU64::new(0)).collect(),
        abort: AtomicBool::new(false),
        op,
        timeout,
    };

    let results: Vec<Result<(), Failure>> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (rank, tbs) in programs.iter().enumerate() {
            for (tb, steps) in tbs.iter().enumerate() {
                let shared = &shared;
                let ntb = tbs.len() as u64;
                let site = Site { rank: rank as u32, tb: tb as u32, op: 0 };
                let handle = scope.spawn(move || {
                    // A panic here is an interpreter bug; stop the other threads instead of
                    // letting them wait for this one until they time out.
                    let run = std::panic::AssertUnwindSafe(|| run_threadblock::<T>(shared, site, ntb, steps));
                    std::panic::catch_unwind(run).unwrap_or_else(|_| {
                        shared.abort.store(true, Ordering::Relaxed);
                        Err(Failure::Internal(site))
                    })
                });
                handles.push((site, handle));
            }
        }
        handles.into_iter().map(|(site, h)| h.join().unwrap_or(Err(Failure::Internal(site)))).collect()
    });

    let mut stalls = Vec::new();
    let mut timed_out = false;
    for result in results {
        match result {
            Ok(()) => {}
            Err(Failure::TimedOut(s)) => {
                timed_out = true;
                stalls.push(s);
            }
            Err(Failure::Aborted(s)) => stalls.push(s),
            Err(Failure::Internal(site)) => return Err(InterpretError::Panicked { site }),
        }
    }
    if timed_out {
        stalls.sort_by_key(|s| s.site);
        return Err(InterpretError::Stalled { timeout, stalls });
    }

    for (rank, bufs) in buffers.iter_mut().enumerate() {
        let output = &shared.memory[rank][Buffer::Output.position()];
        for (dst, src) in bufs.output.iter_mut().zip(output) {
            *dst = T::from_bits(src.load(Ordering::Relaxed));
        }
    }
    Ok(())
}

fn resolve(geometry: &Geometry, site: Site, op: &Op) -> Result<Step, InterpretError> {
    let e = op.effects();
    // Chunk `k` of `loc` (all of its chunks for `None`), cut to the operation's part.
    let span = |loc: &Loc, k: Option<u32>| -> Result<Span, InterpretError> {
        let rank = loc.peer.unwrap_or(site.rank);
        let buf = k.map_or(loc.buf, |k| BufRef::new(loc.buf.buffer, loc.buf.index + k, 1));
        // The plan was validated, so every reference is in range; a failure here is a bug.
        let mut range = geometry.extent(rank, buf).ok_or(InterpretError::Panicked { site })?;
        if let Some(part) = e.part {
            let cut = part.of_len(range.len());
            range = range.start + cut.start..range.start + cut.end;
        }
        Ok(Span { rank: rank as usize, buffer: loc.buf.buffer.position(), range })
    };
    let chunks: Vec<Option<u32>> = match (e.part, e.inputs.first()) {
        (Some(_), Some(lead)) => (0..lead.buf.count).map(Some).collect(),
        _ => vec![None],
    };
    let mut moves = Vec::with_capacity(chunks.len());
    for k in chunks.into_iter().filter(|_| !e.inputs.is_empty()) {
        let inputs = e.inputs.iter().map(|l| span(l, k)).collect::<Result<_, _>>()?;
        let outputs = e.outputs.iter().map(|l| span(l, k)).collect::<Result<_, _>>()?;
        moves.push(Move { inputs, outputs });
    }
    Ok(Step {
        op: op.to_string().trim_end().to_string(),
        wait: e.wait,
        wait_tb: e.wait_tb,
        barrier: e.barrier,
        moves,
        signal: e.signal,
        via: e.via,
        flush: e.flush,
    })
}

/// Spins until `ready()` (returning what it observed), bounded by the shared timeout and
/// abandoned when another thread aborts the run.
fn spin(shared: &Shared, mut ready: impl FnMut() -> bool) -> Result<(), bool> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if ready() {
            return Ok(());
        }
        if shared.abort.load(Ordering::Relaxed) {
            return Err(false);
        }
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 256 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        if spins >= 64 && start.elapsed() > shared.timeout {
            // One last look, so a wait satisfied right at the deadline is not reported.
            if ready() {
                return Ok(());
            }
            shared.abort.store(true, Ordering::Relaxed);
            return Err(true);
        }
    }
}

/// Runs one thread block. A port put is the proxy's: it is applied as late as the port channel
/// allows, at the link's next signal or flush, so a plan that writes a put's source before the
/// flush computes a wrong result here too.
fn run_threadblock<T: Element>(shared: &Shared, site: Site, ntb: u64, steps: &[Step]) -> Result<(), Failure> {
    let rank = site.rank as usize;
    let mut expected: BTreeMap<Link, u64> = BTreeMap::new();
    // Port puts not applied yet, per link, in order.
    let mut pending: BTreeMap<Link, Vec<&Step>> = BTreeMap::new();
    let apply = |step: &Step| {
        for m in &step.moves {
            if let Some((first, rest)) = m.inputs.split_first() {
                compute::<T>(shared, first, rest, &m.outputs);
            }
        }
    };
    let mut barriers = 0u64;
    let progress = &shared.progress[rank][site.tb as usize];
    for (i, step) in steps.iter().enumerate() {
        let here = Site { op: i as u32, ..site };
        let fail = |timed_out: bool, waiting_for: String| {
            let stall = Stall { site: here, op: step.op.clone(), waiting_for };
            if timed_out { Failure::TimedOut(stall) } else { Failure::Aborted(stall) }
        };
        if let Some(link) = step.wait {
            let want = expected.entry(link).or_insert(0);
            *want += 1;
            let want = *want;
            let key = (site.rank, link.peer, link.channel, link.port);
            let counter = shared.inbound.get(&key).ok_or(Failure::Internal(here))?;
            spin(shared, || counter.load(Ordering::Acquire) >= want).map_err(|t| {
                let seen = counter.load(Ordering::Acquire);
                let kind = if link.port { "port channel" } else { "channel" };
                fail(t, format!("signal #{want} from rank {} {kind} {} (received {seen})", link.peer, link.channel))
            })?;
        }
        if let Some((tb, at)) = step.wait_tb {
            let other = shared.progress[rank].get(tb as usize).ok_or(Failure::Internal(here))?;
            spin(shared, || other.load(Ordering::Acquire) > at).map_err(|t| {
                let done = other.load(Ordering::Acquire);
                fail(t, format!("tb {tb} to finish op {at} (it has finished {done} ops)"))
            })?;
        }
        if step.barrier {
            barriers += 1;
            let arrivals = &shared.arrivals[rank];
            arrivals.fetch_add(1, Ordering::AcqRel);
            let want = barriers * ntb;
            spin(shared, || arrivals.load(Ordering::Acquire) >= want).map_err(|t| {
                let seen = arrivals.load(Ordering::Acquire);
                fail(t, format!("barrier #{barriers} ({seen} of {want} arrivals)"))
            })?;
        }
        match step.via {
            Some(link) => pending.entry(link).or_default().push(step),
            None => apply(step),
        }
        for link in [step.signal, step.flush].into_iter().flatten() {
            pending.remove(&link).into_iter().flatten().for_each(apply);
        }
        if let Some(link) = step.signal {
            shared
                .inbound
                .get(&(link.peer, site.rank, link.channel, link.port))
                .ok_or(Failure::Internal(here))?
                .fetch_add(1, Ordering::Release);
        }
        progress.store(i as u32 + 1, Ordering::Release);
    }
    // Validation requires a flush after every port put; a valid plan has none left.
    pending.into_values().flatten().for_each(apply);
    Ok(())
}

fn compute<T: Element>(shared: &Shared, first: &Span, rest: &[Span], outputs: &[Span]) {
    let cell = |s: &Span, k: usize| &shared.memory[s.rank][s.buffer][s.range.start + k];
    for k in 0..first.range.len() {
        let mut acc = T::from_bits(cell(first, k).load(Ordering::Relaxed));
        for other in rest {
            let v = T::from_bits(cell(other, k).load(Ordering::Relaxed));
            acc = T::combine(shared.op, acc, v);
        }
        for out in outputs {
            cell(out, k).store(acc.to_bits(), Ordering::Relaxed);
        }
    }
}

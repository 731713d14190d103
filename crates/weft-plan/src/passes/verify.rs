//! Pass 7: static verification of a plan by symbolic execution.
//!
//! Every thread block of every rank is executed on symbolic chunk values (multisets of input
//! chunks), each operation carrying a vector clock over all thread blocks. A wait joins the clock
//! of the signal (or thread block step, or barrier arrivals) it consumes. This proves, for one
//! plan and every message size:
//!
//! - **deadlock freedom**: the execution reaches the end of every thread block (semaphores are
//!   counters, so whether a wait can proceed does not depend on the interleaving);
//! - **race freedom**: every two accesses to one chunk, at least one a write, are ordered by
//!   happens-before (program order, signal→wait, thread block step, barrier) — so every
//!   interleaving computes the same values;
//! - **correctness**: the symbolic outputs equal the collective's postcondition, and nothing reads
//!   a chunk before it is written.
//!
//! [`verify_in_place`] proves the same for a call in place (nccl-tests' layout, [`InPlace`]):
//! each output chunk that overlaps an input chunk is the same cell, so a write of the output
//! and a read of the input it overwrites are conflicting accesses that must be ordered, and a
//! read ordered after the write sees the output value, which the postcondition then rejects.
//! A copy of an input chunk onto the output chunk that is its memory (a broadcast root's own
//! copy) stores the bytes it has just read: it counts as the read alone, so other readers of
//! that input do not race it, and every write of the cell must still be ordered with it.
//!
//! A port put ([`Effects::via`](crate::plan::Effects)) reads its source and writes the peer
//! some time after the operation: its accesses belong to a clock component of their own per
//! thread block and port link (the proxy's connection, which applies its puts in order), known
//! complete to the pusher after a flush of the link and to the peer after the link's next
//! signal. So a source written again before the flush, or a peer chunk read without the
//! signal that covers the put, is a race.
//!
//! Thread-block groups ([`Part`](crate::plan::Part)): every chunk is verified as
//! [`ExecutionPlan::cell_parts`] cells, and an operation on part `i` of `n` touches the cells of
//! that part only, so group members that move different parts of one chunk do not race, and a
//! read of a whole chunk must be ordered after every member's write.
//!
//! Under the LL protocol a receive learns of its data from the packets themselves, which
//! publish nothing else: its wait orders only the read of the transfer's own chunk after the
//! send that wrote it, and joins nothing of the sender's clock.

use std::collections::BTreeMap;
use std::rc::Rc;

use thiserror::Error;

use crate::dsl::{Buffer, Collective, InputChunk};
use crate::plan::{ExecutionPlan, Link, LoadError, Protocol, Site};

use super::postcondition::describe;

/// Why a plan failed verification.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The plan is structurally invalid.
    #[error("invalid plan: {0}")]
    Invalid(#[from] LoadError),
    /// The plan's shape does not match the collective.
    #[error("plan shape ({plan}) does not match the collective ({collective})")]
    Shape {
        /// The plan's ranks and chunk counts.
        plan: String,
        /// The collective's.
        collective: String,
    },
    /// Some thread blocks can never finish.
    #[error("plan deadlocks: {}", stuck.iter().map(|(s, op)| format!("{s} `{op}`")).collect::<Vec<_>>().join("; "))]
    Deadlock {
        /// Each stuck thread block's next operation.
        stuck: Vec<(Site, String)>,
    },
    /// Two conflicting accesses are not ordered.
    #[error("data race on rank {rank} {buffer}[{index}] between {first} and {second}")]
    Race {
        /// Rank owning the chunk.
        rank: u32,
        /// Buffer.
        buffer: Buffer,
        /// Chunk.
        index: u32,
        /// The earlier access.
        first: Site,
        /// The unordered later access.
        second: Site,
    },
    /// A chunk is read before anything writes it.
    #[error("{site} reads rank {rank} {buffer}[{index}] before anything writes it")]
    Uninitialized {
        /// The reading operation.
        site: Site,
        /// Rank owning the chunk.
        rank: u32,
        /// Buffer.
        buffer: Buffer,
        /// Chunk.
        index: u32,
    },
    /// The plan's buffers have no in-place layout (input and output chunk counts not equal and
    /// not one the other times the ranks).
    #[error("plan has no in-place layout ({input} input chunks, {output} output chunks, {ranks} ranks)")]
    NoInPlaceLayout {
        /// Input chunks.
        input: u32,
        /// Output chunks.
        output: u32,
        /// Ranks.
        ranks: u32,
    },
    /// The plan does not compute the collective.
    #[error("plan violates the postcondition at rank {rank} output[{index}]: expected {expected}, found {found}")]
    Postcondition {
        /// Rank.
        rank: u32,
        /// Output chunk.
        index: u32,
        /// Required value.
        expected: String,
        /// Computed value.
        found: String,
    },
}

type Value = Rc<Vec<InputChunk>>;

#[derive(Clone, Default)]
struct Cell {
    value: Option<Value>,
    /// Global thread block and op index of the last write.
    write: Option<(usize, u32)>,
    /// Reads of the current value.
    reads: Vec<(usize, u32)>,
}

struct Tb {
    rank: u32,
    id: u32,
    pc: usize,
    clock: Vec<u32>,
    waits: BTreeMap<Link, usize>,
    barriers: usize,
    arrived: bool,
    /// Clock after each completed op.
    done: Vec<Vec<u32>>,
}

/// Where a call in place keeps its input inside its output (nccl-tests' layout), in chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// As many input as output chunks: input chunk `i` is output chunk `i` (all-reduce,
    /// broadcast, all-to-all).
    Same,
    /// The output holds every rank's input: rank `r`'s input chunk `i` is its output chunk
    /// `r * input chunks + i` (all-gather).
    InputInOutput,
    /// The input holds every rank's output: rank `r`'s output chunk `j` is its input chunk
    /// `r * output chunks + j` (reduce-scatter).
    OutputInInput,
}

impl InPlace {
    /// The layout of `plan`'s buffers in place, from their chunk counts.
    pub fn of(plan: &ExecutionPlan) -> Option<Self> {
        let (i, o, n) = (plan.input_chunks, plan.output_chunks, plan.nranks);
        if i == o {
            Some(Self::Same)
        } else if Some(o) == i.checked_mul(n) {
            Some(Self::InputInOutput)
        } else if Some(i) == o.checked_mul(n) {
            Some(Self::OutputInInput)
        } else {
            None
        }
    }

    /// Where a call of rank `rank` in this layout puts its input and its output inside the one
    /// buffer, as byte offsets `(input, output)`, for an input of `input_bytes` and an output
    /// of `output_bytes`; `None` when they overflow.
    pub fn byte_offsets(self, rank: u64, input_bytes: u64, output_bytes: u64) -> Option<(u64, u64)> {
        match self {
            Self::Same => Some((0, 0)),
            Self::InputInOutput => Some((rank.checked_mul(input_bytes)?, 0)),
            Self::OutputInInput => Some((0, rank.checked_mul(output_bytes)?)),
        }
    }

    /// The input chunk of rank `rank` that output chunk `j` overlaps, if any.
    pub fn input_of(self, plan: &ExecutionPlan, rank: u32, j: u32) -> Option<u32> {
        match self {
            Self::Same => Some(j),
            Self::InputInOutput => j.checked_sub(rank * plan.input_chunks).filter(|&i| i < plan.input_chunks),
            Self::OutputInInput => Some(rank * plan.output_chunks + j),
        }
    }
}

/// Verifies `plan` against `collective` (see the module documentation).
pub fn verify(plan: &ExecutionPlan, collective: &Collective) -> Result<(), VerifyError> {
    run(plan, collective, None)
}

/// Verifies `plan` against `collective` for calls in place: as [`verify`], with every output
/// chunk that overlaps an input chunk ([`InPlace`]) the same memory.
pub fn verify_in_place(plan: &ExecutionPlan, collective: &Collective) -> Result<(), VerifyError> {
    let layout = InPlace::of(plan).ok_or(VerifyError::NoInPlaceLayout {
        input: plan.input_chunks,
        output: plan.output_chunks,
        ranks: plan.nranks,
    })?;
    run(plan, collective, Some(layout))
}

fn run(plan: &ExecutionPlan, collective: &Collective, in_place: Option<InPlace>) -> Result<(), VerifyError> {
    plan.validate()?;
    let shape = |n: u32, i: u32, o: u32, k: u32| format!("{n} ranks, {i} in, {o} out, {k} classes");
    let plan_shape = shape(plan.nranks, plan.input_chunks, plan.output_chunks, plan.size_classes);
    let coll_shape =
        shape(collective.nranks(), collective.input_chunks(), collective.output_chunks(), collective.size_classes());
    if plan_shape != coll_shape {
        return Err(VerifyError::Shape { plan: plan_shape, collective: coll_shape });
    }

    let mut base = Vec::with_capacity(plan.ranks.len());
    let mut tbs: Vec<Tb> = Vec::new();
    for rank in &plan.ranks {
        base.push(tbs.len());
        for tb in &rank.threadblocks {
            tbs.push(Tb {
                rank: rank.rank,
                id: tb.id,
                pc: 0,
                clock: Vec::new(),
                waits: BTreeMap::new(),
                barriers: 0,
                arrived: false,
                done: Vec::with_capacity(tb.ops.len()),
            });
        }
    }
    let g_count = tbs.len();
    // One clock component per (thread block, port link it puts on), after the thread blocks':
    // its value is how many of the connection's puts are known complete.
    let mut connections: BTreeMap<(usize, Link), usize> = BTreeMap::new();
    let mut connection_owner: Vec<usize> = Vec::new();
    for (g, tb) in tbs.iter().enumerate() {
        for op in &plan.ranks[tb.rank as usize].threadblocks[tb.id as usize].ops {
            if let Some(link) = op.effects().via {
                connections.entry((g, link)).or_insert_with(|| {
                    connection_owner.push(g);
                    g_count + connection_owner.len() - 1
                });
            }
        }
    }
    // Per connection component, the operation index of each put.
    let mut puts: Vec<Vec<u32>> = vec![Vec::new(); connection_owner.len()];
    let components = g_count + connection_owner.len();
    for tb in &mut tbs {
        tb.clock = vec![0; components];
    }
    // Every chunk is `parts` cells, one per part of the finest thread-block group split.
    let parts = plan.cell_parts()? as usize;
    let mut memory: Vec<[Vec<Cell>; 3]> = plan
        .ranks
        .iter()
        .map(|r| {
            let input = (0..plan.input_chunks)
                .flat_map(|i| std::iter::repeat_n(i, parts))
                .map(|i| Cell { value: Some(Rc::new(vec![InputChunk::new(r.rank, i)])), ..Cell::default() })
                .collect();
            let output = vec![Cell::default(); plan.output_chunks as usize * parts];
            let scratch = vec![Cell::default(); r.scratch.len() * parts];
            [input, output, scratch]
        })
        .collect();
    // The cell holding (rank, buffer position, chunk): an output chunk that overlaps an input
    // chunk in place is the input's cell.
    let slot = |rank: u32, position: usize, index: u32| -> (usize, usize) {
        let aliased = in_place.filter(|_| position == Buffer::Output.position());
        match aliased.and_then(|l| l.input_of(plan, rank, index)) {
            Some(i) => (Buffer::Input.position(), i as usize),
            None => (position, index as usize),
        }
    };
    let packets = plan.protocol == Protocol::Ll;
    // (from, to, channel, port) -> clock of each signal and the operation that sent it, in order.
    type Sent = (Vec<u32>, (usize, u32));
    let mut signals: BTreeMap<(u32, u32, u32, bool), Vec<Sent>> = BTreeMap::new();
    // (rank, barrier number) -> arrival clocks.
    let mut arrivals: BTreeMap<(u32, usize), Vec<Vec<u32>>> = BTreeMap::new();

    loop {
        let mut progress = false;
        for g in 0..g_count {
            loop {
                let (rank, id, pc) = (tbs[g].rank, tbs[g].id, tbs[g].pc);
                let ops = &plan.ranks[rank as usize].threadblocks[id as usize].ops;
                let Some(op) = ops.get(pc) else { break };
                let site = Site { rank, tb: id, op: pc as u32 };
                let e = op.effects();
                // Can it start?
                let mut joins: Vec<Vec<u32>> = Vec::new();
                // The send whose packets this operation reads (LL): that write alone is ordered.
                let mut packet_send = None;
                if let Some(l) = e.wait {
                    let k = tbs[g].waits.get(&l).copied().unwrap_or(0);
                    match signals.get(&(l.peer, rank, l.channel, l.port)).and_then(|s| s.get(k)) {
                        Some((_, sender)) if packets => packet_send = Some(*sender),
                        Some((c, _)) => joins.push(c.clone()),
                        None => break,
                    }
                }
                if let Some((tb, step)) = e.wait_tb {
                    let other = &tbs[base[rank as usize] + tb as usize];
                    match other.done.get(step as usize) {
                        Some(c) => joins.push(c.clone()),
                        None => break,
                    }
                }
                if e.barrier {
                    let key = (rank, tbs[g].barriers);
                    if !tbs[g].arrived {
                        let c = tbs[g].clock.clone();
                        arrivals.entry(key).or_default().push(c);
                        tbs[g].arrived = true;
                        progress = true;
                    }
                    let ntb = plan.ranks[rank as usize].threadblocks.len();
                    match arrivals.get(&key) {
                        Some(all) if all.len() == ntb => joins.extend(all.iter().cloned()),
                        _ => break,
                    }
                }
                // Start: join clocks.
                let tb = &mut tbs[g];
                for c in &joins {
                    for (x, y) in tb.clock.iter_mut().zip(c) {
                        *x = (*x).max(*y);
                    }
                }
                if let Some(l) = e.wait {
                    *tb.waits.entry(l).or_insert(0) += 1;
                }
                if e.barrier {
                    tb.barriers += 1;
                    tb.arrived = false;
                }
                let clock = tb.clock.clone();
                // A port put's accesses are the connection's n-th put, not this operation's.
                let connection = e.via.map(|l| connections[&(g, l)]);
                let me = match connection {
                    Some(v) => {
                        puts[v - g_count].push(pc as u32);
                        (v, puts[v - g_count].len() as u32 - 1)
                    }
                    None => (g, pc as u32),
                };
                let ordered = |(h, s): (usize, u32)| h == me.0 || clock[h] > s || packet_send == Some((h, s));
                let site_of = |(h, s): (usize, u32)| match h.checked_sub(g_count) {
                    Some(v) => {
                        let owner = &tbs[connection_owner[v]];
                        Site { rank: owner.rank, tb: owner.id, op: puts[v][s as usize] }
                    }
                    None => Site { rank: tbs[h].rank, tb: tbs[h].id, op: s },
                };

                // Data phase: the cells of the operation's part of each chunk (all of them
                // without a part).
                let cells = match e.part {
                    Some(p) => {
                        p.index as usize * parts / p.count as usize..(p.index as usize + 1) * parts / p.count as usize
                    }
                    None => 0..parts,
                };
                if !e.inputs.is_empty() {
                    let count = e.inputs[0].buf.count;
                    let mut results: Vec<Value> = Vec::with_capacity(count as usize * cells.len());
                    for (k, sub) in (0..count).flat_map(|k| cells.clone().map(move |c| (k, c))) {
                        let mut acc: Vec<InputChunk> = Vec::new();
                        for loc in &e.inputs {
                            let owner = loc.peer.unwrap_or(rank);
                            let index = loc.buf.index + k;
                            let (position, at) = slot(owner, loc.buf.buffer.position(), index);
                            let cell = &mut memory[owner as usize][position][at * parts + sub];
                            let race = |first| VerifyError::Race {
                                rank: owner,
                                buffer: loc.buf.buffer,
                                index,
                                first,
                                second: site,
                            };
                            if let Some(w) = cell.write.filter(|&w| !ordered(w)) {
                                return Err(race(site_of(w)));
                            }
                            let Some(v) = &cell.value else {
                                return Err(VerifyError::Uninitialized {
                                    site,
                                    rank: owner,
                                    buffer: loc.buf.buffer,
                                    index,
                                });
                            };
                            acc.extend(v.iter().copied());
                            cell.reads.push(me);
                        }
                        acc.sort_unstable();
                        results.push(Rc::new(acc));
                    }
                    for loc in &e.outputs {
                        let owner = loc.peer.unwrap_or(rank);
                        for (j, value) in results.iter().enumerate() {
                            let (k, sub) = (j / cells.len(), cells.start + j % cells.len());
                            let index = loc.buf.index + k as u32;
                            let (position, at) = slot(owner, loc.buf.buffer.position(), index);
                            // In place, a copy of an input chunk onto the output chunk that is
                            // the same memory (a broadcast root's own copy) stores the bytes it
                            // has just read: the value stays, and its read is already ordered
                            // against every write of the cell, before and after. A read, not a
                            // write, so the plan's other readers of that input do not race it.
                            let aliased = position != loc.buf.buffer.position();
                            if let [src] = e.inputs.as_slice()
                                && aliased
                                && src.peer.unwrap_or(rank) == owner
                                && slot(owner, src.buf.buffer.position(), src.buf.index + k as u32) == (position, at)
                            {
                                continue;
                            }
                            let cell = &mut memory[owner as usize][position][at * parts + sub];
                            let race = |first| VerifyError::Race {
                                rank: owner,
                                buffer: loc.buf.buffer,
                                index,
                                first,
                                second: site,
                            };
                            let earlier = cell.write.into_iter().chain(cell.reads.iter().copied());
                            if let Some(a) = earlier.filter(|&a| a != me).find(|&a| !ordered(a)) {
                                return Err(race(site_of(a)));
                            }
                            cell.value = Some(value.clone());
                            cell.write = Some(me);
                            cell.reads.clear();
                        }
                    }
                }

                // Complete.
                let tb = &mut tbs[g];
                tb.clock[g] = pc as u32 + 1;
                // A flush completes the connection's puts for this thread block.
                if let Some(l) = e.flush
                    && let Some(&v) = connections.get(&(g, l))
                {
                    tb.clock[v] = puts[v - g_count].len() as u32;
                }
                tb.done.push(tb.clock.clone());
                tb.pc += 1;
                if let Some(l) = e.signal {
                    // A port link's signal is applied after the connection's earlier puts.
                    let mut sent = tb.clock.clone();
                    if let Some(&v) = connections.get(&(g, l)) {
                        sent[v] = puts[v - g_count].len() as u32;
                    }
                    signals.entry((rank, l.peer, l.channel, l.port)).or_default().push((sent, (g, pc as u32)));
                }
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }

    let stuck: Vec<(Site, String)> = tbs
        .iter()
        .filter_map(|tb| {
            let ops = &plan.ranks[tb.rank as usize].threadblocks[tb.id as usize].ops;
            ops.get(tb.pc).map(|op| {
                let site = Site { rank: tb.rank, tb: tb.id, op: tb.pc as u32 };
                (site, op.to_string().trim_end().to_string())
            })
        })
        .collect();
    if !stuck.is_empty() {
        return Err(VerifyError::Deadlock { stuck });
    }

    for rank in 0..plan.nranks {
        for index in 0..plan.output_chunks {
            let Some(expected) = collective.postcondition(rank, index) else {
                continue;
            };
            let (position, at) = slot(rank, Buffer::Output.position(), index);
            for cell in &memory[rank as usize][position][at * parts..(at + 1) * parts] {
                let found = cell.value.clone();
                if found.as_deref() != Some(&expected) {
                    return Err(VerifyError::Postcondition {
                        rank,
                        index,
                        expected: describe(&expected),
                        found: found.map_or_else(|| "nothing (never written)".into(), |v| describe(&v)),
                    });
                }
            }
        }
    }
    Ok(())
}

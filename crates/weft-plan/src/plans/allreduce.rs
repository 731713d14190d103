//! AllReduce algorithms.

use super::{at_least_two, nodes};
use crate::dsl::{Buffer, Chunk, Collective, DslError, Program};
use crate::plan::Protocol;

/// Ring AllReduce: `nranks` chunks; chunk `i` is reduced along the ring from rank `i + 1` to
/// rank `i` (reduce-scatter), then forwarded around the ring (all-gather).
///
/// Partial sums go from rank to rank through staging and are never stored (`rrs`); the final
/// sum is stored and forwarded at once (`rrcs`); the all-gather puts straight into the peers'
/// outputs and forwards them (`rcs`).
pub fn ring_allreduce(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("ring_allreduce", nranks)?;
    let n = nranks;
    let p = Program::new("ring_allreduce", Collective::all_reduce(n, n)?).with_instances(instances)?;
    for i in 0..n {
        let start = (i + 1) % n;
        let mut acc = p.chunk(start, Buffer::Input, i, 1)?;
        for step in 1..n {
            let r = (start + step) % n;
            let buffer = if r == i { Buffer::Output } else { Buffer::Scratch };
            acc = p.chunk(r, Buffer::Input, i, 1)?.reduce_to(&acc, buffer, i)?;
        }
        for step in 1..n {
            acc = acc.copy((i + step) % n, Buffer::Output, i)?;
        }
    }
    Ok(p)
}

/// [`ring_allreduce`] moving LL packets: every transfer is staged in the receiver's scratch and
/// polled there, with no semaphore round trip (small messages).
pub fn ring_allreduce_ll(nranks: u32, instances: u32) -> Result<Program, DslError> {
    Ok(ring_allreduce(nranks, instances)?.with_name("ring_allreduce_ll").with_protocol(Protocol::Ll))
}

/// All-pairs (two-phase) AllReduce: rank `q` gathers chunk `q` from every peer and reduces it,
/// then puts the result into every peer's output.
pub fn allpairs_allreduce(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("allpairs_allreduce", nranks)?;
    let n = nranks;
    let p = Program::new("allpairs_allreduce", Collective::all_reduce(n, n)?).with_instances(instances)?;
    for q in 0..n {
        let own = p.chunk(q, Buffer::Input, q, 1)?;
        let mut acc: Option<Chunk<'_>> = None;
        for s in (1..n).map(|k| (q + k) % n) {
            let theirs = p.chunk(s, Buffer::Input, q, 1)?;
            acc = Some(match acc {
                None => own.reduce_to(&theirs, Buffer::Output, q)?,
                Some(a) => a.reduce(&theirs)?,
            });
        }
        if let Some(acc) = acc {
            for s in (1..n).map(|k| (q + k) % n) {
                acc.copy(s, Buffer::Output, q)?;
            }
        }
    }
    Ok(p)
}

/// AllReduce through a root: every peer's input lands in rank 0's scratch, rank 0 folds them
/// locally in rank order and sends the sum into every peer's output. Two hops and no partial
/// sums on the wire, but rank 0's links carry everything: for few ranks and small messages.
/// The last fold and one send become a `reduce_send` (MSCCL++'s reduce-send fusion).
pub fn reduce_broadcast_allreduce(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("reduce_broadcast_allreduce", nranks)?;
    let n = nranks;
    let p = Program::new("reduce_broadcast_allreduce", Collective::all_reduce(n, 1)?).with_instances(instances)?;
    {
        let staged = (1..n)
            .map(|r| p.chunk(r, Buffer::Input, 0, 1)?.copy(0, Buffer::Scratch, r - 1))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sum = p.chunk(0, Buffer::Input, 0, 1)?.reduce_to(&staged[0], Buffer::Output, 0)?;
        for theirs in &staged[1..] {
            sum = sum.reduce(theirs)?;
        }
        for r in 1..n {
            sum.copy(r, Buffer::Output, 0)?;
        }
    }
    Ok(p)
}

/// [`allpairs_allreduce`] moving LL packets (the executor's counterpart of the native 2PA-LL
/// kernel): both phases poll staged packets instead of semaphores.
pub fn allpairs_allreduce_ll(nranks: u32, instances: u32) -> Result<Program, DslError> {
    Ok(allpairs_allreduce(nranks, instances)?.with_name("allpairs_allreduce_ll").with_protocol(Protocol::Ll))
}

/// Hierarchical AllReduce over `nranks / ranks_per_node` nodes of `ranks_per_node` ranks (rank
/// `node * ranks_per_node + local`), in three phases (MSCCLang's hierarchical AllReduce):
///
/// 1. intra-node reduce-scatter: local rank `g` of each node reduces block `g` (one chunk per
///    node) over its node, into scratch;
/// 2. inter-node all-pairs AllReduce of block `g` among the ranks with local index `g`: chunk
///    `j` of the block is reduced on node `j` and put into the other nodes' outputs;
/// 3. intra-node all-gather: each rank puts its finished block into its node peers' outputs.
///
/// Only phase 2 crosses nodes, and each rank sends just its own block there.
pub fn hierarchical_allreduce(nranks: u32, ranks_per_node: u32, instances: u32) -> Result<Program, DslError> {
    let name = "hierarchical_allreduce";
    let nn = nodes(name, nranks, ranks_per_node)?;
    let g_count = ranks_per_node;
    let p = Program::new(name, Collective::all_reduce(nranks, nranks)?).with_instances(instances)?;
    let rank = |node: u32, local: u32| node * g_count + local;

    // Phase 1: scratch[0..nn] of rank (a, g) = block g summed over node a.
    for a in 0..nn {
        for g in 0..g_count {
            let own = p.chunk(rank(a, g), Buffer::Input, g * nn, nn)?;
            let mut acc: Option<Chunk<'_>> = None;
            for h in (1..g_count).map(|k| (g + k) % g_count) {
                let theirs = p.chunk(rank(a, h), Buffer::Input, g * nn, nn)?;
                acc = Some(match acc {
                    None => own.reduce_to(&theirs, Buffer::Scratch, 0)?,
                    Some(acc) => acc.reduce(&theirs)?,
                });
            }
            if acc.is_none() {
                own.copy(rank(a, g), Buffer::Scratch, 0)?;
            }
        }
    }
    // Phase 2: chunk g * nn + j is finished on rank (j, g).
    for g in 0..g_count {
        for j in 0..nn {
            let home = rank(j, g);
            let own = p.chunk(home, Buffer::Scratch, j, 1)?;
            let mut acc: Option<Chunk<'_>> = None;
            for b in (1..nn).map(|k| (j + k) % nn) {
                let theirs = p.chunk(rank(b, g), Buffer::Scratch, j, 1)?;
                acc = Some(match acc {
                    None => own.reduce_to(&theirs, Buffer::Output, g * nn + j)?,
                    Some(acc) => acc.reduce(&theirs)?,
                });
            }
            let acc = match acc {
                Some(acc) => acc,
                None => own.copy(home, Buffer::Output, g * nn + j)?,
            };
            for b in (1..nn).map(|k| (j + k) % nn) {
                acc.copy(rank(b, g), Buffer::Output, g * nn + j)?;
            }
        }
    }
    // Phase 3: block g of rank (a, g) to the other ranks of node a.
    for a in 0..nn {
        for g in 0..g_count {
            let block = p.chunk(rank(a, g), Buffer::Output, g * nn, nn)?;
            for h in (1..g_count).map(|k| (g + k) % g_count) {
                block.copy(rank(a, h), Buffer::Output, g * nn)?;
            }
        }
    }
    Ok(p)
}

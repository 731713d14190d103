//! AllGather and ReduceScatter algorithms.

use super::at_least_two;
use crate::dsl::{Buffer, Chunk, Collective, DslError, Program};

/// Ring AllGather: each rank copies its input into its own output block, then the block travels
/// around the ring, each rank forwarding it to the next (`rcs` with direct puts).
pub fn ring_allgather(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("ring_allgather", nranks)?;
    let n = nranks;
    let p = Program::new("ring_allgather", Collective::all_gather(n, 1)?).with_instances(instances)?;
    for r in 0..n {
        let mut c = p.chunk(r, Buffer::Input, 0, 1)?.copy(r, Buffer::Output, r)?;
        for step in 1..n {
            c = c.copy((r + step) % n, Buffer::Output, r)?;
        }
    }
    Ok(p)
}

/// Ring ReduceScatter: block `q` is reduced along the ring from rank `q + 1` to rank `q`, the
/// partial sums travelling through staging without being stored (`rrs`).
pub fn ring_reduce_scatter(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("ring_reduce_scatter", nranks)?;
    let n = nranks;
    let p = Program::new("ring_reduce_scatter", Collective::reduce_scatter(n, 1)?).with_instances(instances)?;
    for q in 0..n {
        let start = (q + 1) % n;
        let mut acc = p.chunk(start, Buffer::Input, q, 1)?;
        for step in 1..n {
            let r = (start + step) % n;
            let (buffer, index) = if r == q { (Buffer::Output, 0) } else { (Buffer::Scratch, q) };
            acc = p.chunk(r, Buffer::Input, q, 1)?.reduce_to(&acc, buffer, index)?;
        }
    }
    Ok(p)
}

/// All-pairs ReduceScatter: every rank sends block `q` of its input to rank `q`, which reduces
/// the contributions as they arrive.
pub fn allpairs_reduce_scatter(nranks: u32, instances: u32) -> Result<Program, DslError> {
    at_least_two("allpairs_reduce_scatter", nranks)?;
    let n = nranks;
    let p = Program::new("allpairs_reduce_scatter", Collective::reduce_scatter(n, 1)?).with_instances(instances)?;
    for q in 0..n {
        let own = p.chunk(q, Buffer::Input, q, 1)?;
        let mut acc: Option<Chunk<'_>> = None;
        for s in (1..n).map(|k| (q + k) % n) {
            let theirs = p.chunk(s, Buffer::Input, q, 1)?;
            acc = Some(match acc {
                None => own.reduce_to(&theirs, Buffer::Output, 0)?,
                Some(a) => a.reduce(&theirs)?,
            });
        }
    }
    Ok(p)
}

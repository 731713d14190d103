//! # 03: an algorithm in the DSL, run on the CPU
//!
//! Writes a ring AllReduce for four ranks with weft's chunk-level DSL ([`weft::plan`]):
//! reduce-scatter around the ring, then all-gather. Compiles it into an execution plan (the
//! compiler checks the postcondition: every rank's output holds the sum of every input),
//! verifies the plan by executing it symbolically (deadlocks, races, postcondition), prints the
//! plan's listing, and runs it on the CPU reference interpreter, one thread per rank and thread
//! block, checking every element. Needs no GPU.
//!
//! ```text
//! cargo run -p weft --example 03_dsl_plan
//! ```

use weft::plan::interp::{RankBuffers, interpret};
use weft::plan::passes::verify;
use weft::plan::{Buffer, Collective, DslError, Program};

const RANKS: u32 = 4;
/// Elements per rank: the interpreter splits them into `RANKS` chunks, the last one shorter.
const COUNT: usize = 1001;

/// Ring AllReduce: chunk `i` is summed around the ring starting after rank `i` and ending at
/// rank `i` (reduce-scatter), then the sum travels on around the ring into every other rank's
/// output (all-gather).
fn ring_allreduce(n: u32) -> Result<Program, DslError> {
    let program = Program::new("example_ring_allreduce", Collective::all_reduce(n, n)?);
    for i in 0..n {
        let start = (i + 1) % n;
        let mut sum = program.chunk(start, Buffer::Input, i, 1)?;
        for step in 1..n {
            let rank = (start + step) % n;
            // Partial sums are staged in scratch; the final one lands in rank i's output.
            let into = if rank == i { Buffer::Output } else { Buffer::Scratch };
            sum = program.chunk(rank, Buffer::Input, i, 1)?.reduce_to(&sum, into, i)?;
        }
        for step in 1..n {
            sum = sum.copy((i + step) % n, Buffer::Output, i)?;
        }
    }
    Ok(program)
}

/// Element `i` of rank `rank`'s input.
fn input(rank: usize, i: usize) -> i64 {
    (rank as i64 + 1) * 1000 + i as i64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let program = ring_allreduce(RANKS)?;
    let plan = program.compile()?;
    verify(&plan, program.collective())?;
    println!("{}", plan.listing());

    let ranks = RANKS as usize;
    let mut buffers: Vec<RankBuffers<i64>> =
        (0..ranks).map(|r| RankBuffers::new((0..COUNT).map(|i| input(r, i)).collect(), vec![0; COUNT])).collect();
    interpret(&plan, &mut buffers, COUNT)?;
    for (rank, b) in buffers.iter().enumerate() {
        for (i, &got) in b.output.iter().enumerate() {
            let want: i64 = (0..ranks).map(|r| input(r, i)).sum();
            if got != want {
                return Err(format!("rank {rank} element {i}: {got}, expected {want}").into());
            }
        }
    }
    println!(
        "03_dsl_plan: ring AllReduce on {RANKS} ranks, {COUNT} elements each: every element of every rank checked"
    );
    Ok(())
}

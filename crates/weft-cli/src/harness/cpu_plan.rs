//! The CPU reference backend of `weft bench` and `weft soak` on a machine without a GPU: a
//! collective's shipped plan (weft-plan) run by the CPU reference interpreter, one host thread
//! per (rank, thread block), on fresh small-integer inputs, every element of every rank's
//! output checked against the host fold of the same inputs.

use std::time::Instant;

use weft_plan::interp::{Element, Interpreter, ReduceOp as PlanOp};
use weft_plan::{ExecutionPlan, RankBuffers};
use weft_types::ReduceOp;

use super::{Collective, NcclTests, Shape, Source};

/// The shipped plan that computes `collective` on `ranks` ranks (a rooted one from or to
/// `root`), by its `weft plan compile` name; `None` when weft ships no plan for it.
pub(crate) fn plan_for(
    collective: Collective,
    ranks: u32,
    root: u32,
) -> Option<Result<(&'static str, ExecutionPlan), String>> {
    let name = match collective {
        Collective::AllReduce => "ring-allreduce",
        Collective::AllGather => "ring-allgather",
        Collective::ReduceScatter => "ring-reduce-scatter",
        Collective::AllToAll => "two-step-alltoall",
        Collective::Broadcast => "direct-broadcast",
        Collective::Reduce | Collective::SendRecv => return None,
    };
    // Two ranks per node where that splits the ranks (two-step all-to-all), else one node.
    let per_node = if ranks > 2 && ranks.is_multiple_of(2) { 2 } else { ranks };
    let shape = crate::plan_cmd::Shape { ranks, ranks_per_node: per_node, instances: 1, root };
    let plan = crate::plan_cmd::program(name, shape)
        .map_err(|e| e.to_string())
        .and_then(|p| p.compile().map_err(|e| e.to_string()));
    Some(plan.map(|plan| (name, plan)))
}

/// The interpreter's operator for `op` (it has no average).
pub(crate) fn plan_op(op: ReduceOp) -> Result<PlanOp, String> {
    match op {
        ReduceOp::Sum => Ok(PlanOp::Sum),
        ReduceOp::Prod => Ok(PlanOp::Prod),
        ReduceOp::Min => Ok(PlanOp::Min),
        ReduceOp::Max => Ok(PlanOp::Max),
        other => Err(format!("the CPU interpreter has no {} operator", other.name())),
    }
}

/// A host element type for the interpreter with small-integer test values (exact in every
/// type, so floating-point results do not depend on the reduction order).
pub(crate) trait HostElement: Element {
    fn small(v: i8) -> Self;
    fn poison() -> Self;
}

macro_rules! host_element {
    ($shift:literal: $($t:ty),*) => {$(
        impl HostElement for $t {
            fn small(v: i8) -> Self {
                // |v| <= 8; unsigned types take v + 8.
                (i64::from(v) + $shift) as $t
            }
            fn poison() -> Self {
                <$t as Element>::from_bits(0x7f7f_7f7f_7f7f_7f7f)
            }
        }
    )*};
}
host_element!(0: f32, f64, i32, i64);
host_element!(8: u32, u64);

/// What one run leaves: every rank's input, every rank's buffers after the run, microseconds.
pub(crate) type Run<T> = (Vec<Vec<T>>, Vec<RankBuffers<T>>, f64);

/// One timed run on fresh small-integer inputs drawn from `seed`.
pub(crate) fn execute<T: HostElement>(
    plan: &ExecutionPlan,
    shape: &Shape,
    op: PlanOp,
    ranks: usize,
    seed: u64,
) -> Result<Run<T>, String> {
    let mut state = seed | 1;
    let mut next = || {
        // xorshift64: fresh inputs for every size, no dependency needed.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state % 16) as i8) - 8
    };
    let inputs: Vec<Vec<T>> = (0..ranks).map(|_| (0..shape.send_count).map(|_| T::small(next())).collect()).collect();
    // Outputs poisoned, so an element the plan never writes cannot pass.
    let mut buffers: Vec<RankBuffers<T>> =
        inputs.iter().map(|i| RankBuffers::new(i.clone(), vec![T::poison(); shape.recv_count])).collect();
    let start = Instant::now();
    Interpreter::new(plan).reduce_op(op).run(&mut buffers, shape.send_count).map_err(|e| e.to_string())?;
    Ok((inputs, buffers, start.elapsed().as_secs_f64() * 1e6))
}

/// Elements of every rank's output that differ from the reference (folded in rank order).
pub(crate) fn count_wrong<T: HostElement>(
    collective: Collective,
    shape: &Shape,
    op: PlanOp,
    inputs: &[Vec<T>],
    outputs: &[RankBuffers<T>],
) -> u64 {
    let ranks = inputs.len() as u32;
    let mut wrong = 0;
    for (rank, b) in outputs.iter().enumerate().filter(|(r, _)| collective.has_output(shape, *r as u32)) {
        for (i, got) in b.output.iter().enumerate() {
            let want = match collective.source(shape, rank as u32, ranks, i as u64) {
                Source::Copy { rank, index } => inputs[rank as usize][index as usize],
                Source::Reduced { index } => {
                    let index = index as usize;
                    inputs.iter().skip(1).fold(inputs[0][index], |acc, x| T::combine(op, acc, x[index]))
                }
            };
            wrong += u64::from(*got != want);
        }
    }
    wrong
}

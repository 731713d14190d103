//! `weft bench` on a machine without a GPU: the collective's shipped plan (weft-plan) run by
//! the CPU reference interpreter, one host thread per (rank, thread block), every element of
//! every rank checked against a host reference computed from the same inputs. Labelled as
//! such: the times are of host threads interpreting a plan, not of a GPU. Under torchrun, rank 0
//! runs it for torchrun's world and the other ranks wait for its verdict ([`run_torchrun`]).

use std::process::ExitCode;
use std::time::Instant;

use weft_bootstrap::{TcpBootstrap, TorchrunEnv};
use weft_plan::interp::{Element, Interpreter, ReduceOp as PlanOp};
use weft_plan::{ExecutionPlan, RankBuffers};
use weft_types::{DataType, ReduceOp};

use super::{BenchOptions, sizes};
use crate::harness::sweep::format_size;
use crate::harness::{Collective, NcclTests, ROOT, Shape, Source, launch};

type BoxError = Box<dyn std::error::Error>;

/// Largest message the CPU backend runs (the interpreter moves elements one atomic at a time).
pub const MAX_BYTES: usize = 1 << 20;

/// The shipped plan that computes `collective` on `ranks` ranks, by its `weft plan compile`
/// name; `None` when weft ships no plan for it.
pub fn plan_for(collective: Collective, ranks: u32) -> Option<Result<(&'static str, ExecutionPlan), String>> {
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
    let shape = crate::plan_cmd::Shape { ranks, ranks_per_node: per_node, instances: 1, root: ROOT };
    let plan = crate::plan_cmd::program(name, shape)
        .map_err(|e| e.to_string())
        .and_then(|p| p.compile().map_err(|e| e.to_string()));
    Some(plan.map(|plan| (name, plan)))
}

/// The interpreter's operator for `op` (it has no average).
fn plan_op(op: ReduceOp) -> Result<PlanOp, String> {
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
trait HostElement: Element {
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
type Run<T> = (Vec<Vec<T>>, Vec<RankBuffers<T>>, f64);

/// One timed run on fresh small-integer inputs.
fn execute<T: HostElement>(
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
fn count_wrong<T: HostElement>(
    collective: Collective,
    shape: &Shape,
    op: PlanOp,
    inputs: &[Vec<T>],
    outputs: &[RankBuffers<T>],
) -> u64 {
    let ranks = inputs.len() as u32;
    let mut wrong = 0;
    for (rank, b) in outputs.iter().enumerate().filter(|(r, _)| collective.has_output(*r as u32)) {
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

/// Checked, timed runs of one size, each on fresh inputs: a single run of host threads is at
/// the scheduler's mercy (one 16 KB row once took 9 ms between rows of 0.4-1.6 ms).
const TRIALS: u64 = 5;

/// The times of `trials` checked runs of one size, each on fresh inputs, and their wrong
/// elements (over every rank) summed.
fn run_trials<T: HostElement>(
    plan: &ExecutionPlan,
    collective: Collective,
    shape: &Shape,
    op: PlanOp,
    ranks: usize,
    (seed, trials): (u64, u64),
) -> Result<(Vec<f64>, u64), String> {
    let mut times = Vec::new();
    let mut wrong = 0;
    for trial in 0..trials {
        let (inputs, outputs, us) =
            execute::<T>(plan, shape, op, ranks, seed.wrapping_add(trial.wrapping_mul(0x9e37)))?;
        times.push(us);
        wrong += count_wrong(collective, shape, op, &inputs, &outputs);
    }
    Ok((times, wrong))
}

/// Median, min and max of `times` (not empty).
fn spread(times: &mut [f64]) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n % 2 == 1 { times[n / 2] } else { (times[n / 2 - 1] + times[n / 2]) / 2.0 };
    (median, times[0], times[n - 1])
}

/// Runs the sweep of `options` on the CPU backend with `ranks` ranks and prints the table.
pub fn run(options: &BenchOptions, ranks: usize) -> Result<ExitCode, BoxError> {
    let c = options.collective;
    println!("# weft bench {}: no GPU here, so the CPU backend runs instead: weft-plan's reference", c.name());
    println!("# interpreter, {ranks} ranks as host threads. Times are of the interpreter, not of a GPU.");
    let Some(plan) = plan_for(c, ranks as u32) else {
        println!("# weft ships no plan for {} yet: nothing to run on the CPU backend.", c.name());
        return Ok(ExitCode::SUCCESS);
    };
    let (name, plan) = plan?;
    let op = if c.reduces() { plan_op(options.op)? } else { PlanOp::Sum };
    // Types the interpreter has; the others are measured as f32 (same element count).
    let dtype = match options.dtype {
        t @ (DataType::F32 | DataType::F64 | DataType::I32 | DataType::U32 | DataType::I64 | DataType::U64) => t,
        other => {
            println!("# {} has no host type in the interpreter: f32 elements instead.", other.name());
            DataType::F32
        }
    };
    println!("# each size: {TRIALS} runs on fresh inputs, the median and the min-max of their times");
    println!("{:>12} {:>12} {:>20} | {:>10} {:>21} {:>7}", "size", "count", "plan", "cpu us", "min-max", "#wrong");
    let mut total_wrong = 0;
    for requested in sizes(options) {
        if requested > MAX_BYTES {
            println!("# sizes above {} are skipped on the CPU backend", format_size(MAX_BYTES as f64));
            break;
        }
        let Some(shape) = c.shape(requested, dtype.size(), ranks) else { continue };
        let seed = requested as u64 ^ 0x9e37_79b9_7f4a_7c15;
        let (mut times, wrong) = match dtype {
            DataType::F64 => run_trials::<f64>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
            DataType::I32 => run_trials::<i32>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
            DataType::U32 => run_trials::<u32>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
            DataType::I64 => run_trials::<i64>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
            DataType::U64 => run_trials::<u64>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
            _ => run_trials::<f32>(&plan, c, &shape, op, ranks, (seed, TRIALS)),
        }?;
        total_wrong += wrong;
        let (median, lo, hi) = spread(&mut times);
        let range = format!("{lo:.1}-{hi:.1}");
        println!("{:>12} {:>12} {:>20} | {median:>10.1} {range:>21} {wrong:>7}", shape.bytes, shape.count, name);
    }
    println!("# {total_wrong} wrong elements (CPU reference interpreter)");
    Ok(if total_wrong == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Runs the sweep under torchrun (`torchrun`: its variables) on a machine without a GPU: rank 0
/// runs it for the whole world (torchrun's ranks as host threads, as [`run`]) and prints the
/// table; the other ranks print nothing and wait for its verdict, with which every rank exits.
pub fn run_torchrun(options: &BenchOptions, torchrun: &TorchrunEnv) -> Result<ExitCode, BoxError> {
    let bootstrap = TcpBootstrap::builder().from_env()?;
    let passed = if torchrun.rank == 0 {
        println!(
            "# under torchrun: rank 0 runs the CPU backend for all {} ranks; the others wait for its verdict",
            torchrun.world_size
        );
        run(options, torchrun.world_size).map(|code| code == ExitCode::SUCCESS).map_err(|e| e.to_string())
    } else {
        Ok(true)
    };
    launch::conclude(&bootstrap, passed, |passed: Vec<bool>| {
        Ok(if passed.iter().all(|&p| p) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_plan_computes_its_collective_at_odd_sizes() {
        for c in Collective::ALL {
            for ranks in [2usize, 3, 4] {
                let Some(plan) = plan_for(c, ranks as u32) else { continue };
                let (_, plan) = plan.unwrap();
                for bytes in [4usize, 40, 1004, 4096] {
                    let Some(shape) = c.shape(bytes, 4, ranks) else { continue };
                    for op in [PlanOp::Sum, PlanOp::Max] {
                        let (_, wrong) = run_trials::<i32>(&plan, c, &shape, op, ranks, (bytes as u64, 1)).unwrap();
                        assert_eq!(wrong, 0, "{c} {ranks} ranks {bytes} bytes {op:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_or_unwritten_element_is_counted() {
        let c = Collective::AllReduce;
        let (_, plan) = plan_for(c, 3).unwrap().unwrap();
        let shape = c.shape(400, 4, 3).unwrap();
        let (inputs, mut outputs, _) = execute::<i32>(&plan, &shape, PlanOp::Sum, 3, 11).unwrap();
        assert_eq!(count_wrong(c, &shape, PlanOp::Sum, &inputs, &outputs), 0);
        outputs[1].output[7] += 1;
        outputs[2].output[99] = i32::poison();
        assert_eq!(count_wrong(c, &shape, PlanOp::Sum, &inputs, &outputs), 2);
    }

    #[test]
    fn unsupported_pieces_are_said_not_faked() {
        assert!(plan_for(Collective::Reduce, 4).is_none());
        assert!(plan_op(ReduceOp::Avg).is_err());
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&mut [9.0, 1.0, 5.0]), (5.0, 1.0, 9.0));
        assert_eq!(spread(&mut [4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}

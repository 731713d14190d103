//! `weft bench` on a machine without a GPU: the collective's shipped plan (weft-plan) run by
//! the CPU reference interpreter, one host thread per (rank, thread block), every element of
//! every rank checked against a host reference computed from the same inputs. Labelled as
//! such: the times are of host threads interpreting a plan, not of a GPU. Under torchrun, rank 0
//! runs it for torchrun's world and the other ranks wait for its verdict ([`run_torchrun`]).

use std::process::ExitCode;

use weft_bootstrap::{TcpBootstrap, TorchrunEnv};
use weft_plan::ExecutionPlan;
use weft_plan::interp::ReduceOp as PlanOp;
use weft_types::DataType;

use super::{BenchOptions, check_root, sizes};
use crate::harness::cpu_plan::{HostElement, count_wrong, execute, plan_for, plan_op};
use crate::harness::sweep::format_size;
use crate::harness::{Collective, NcclTests, Shape, launch};

type BoxError = Box<dyn std::error::Error>;

/// Largest message the CPU backend runs (the interpreter moves elements one atomic at a time).
pub const MAX_BYTES: usize = 1 << 20;

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
    check_root(options.root, ranks)?;
    println!("# weft bench {}: no GPU here, so the CPU backend runs instead: weft-plan's reference", c.name());
    println!("# interpreter, {ranks} ranks as host threads. Times are of the interpreter, not of a GPU.");
    let Some(plan) = plan_for(c, ranks as u32, options.root) else {
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
        let Some(shape) = c.shape(requested, dtype.size(), ranks, options.root) else { continue };
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
    fn every_shipped_plan_computes_its_collective_at_odd_sizes_and_every_root() {
        for c in Collective::ALL {
            for ranks in [2u32, 3, 4] {
                for root in c.roots(ranks) {
                    let Some(plan) = plan_for(c, ranks, root) else { continue };
                    let (_, plan) = plan.unwrap();
                    for bytes in [4usize, 40, 1004, 4096] {
                        let Some(shape) = c.shape(bytes, 4, ranks as usize, root) else { continue };
                        for op in [PlanOp::Sum, PlanOp::Max] {
                            let trial = run_trials::<i32>(&plan, c, &shape, op, ranks as usize, (bytes as u64, 1));
                            assert_eq!(trial.unwrap().1, 0, "{c} {ranks} ranks root {root} {bytes} bytes {op:?}");
                        }
                    }
                }
            }
        }
    }

    /// A plan built for one root, checked as a call at another, fails the check: the root of
    /// the plan and of the reference must be the same.
    #[test]
    fn a_plan_from_another_root_is_caught() {
        let c = Collective::Broadcast;
        let (_, plan) = plan_for(c, 3, 2).unwrap().unwrap();
        let shape = c.shape(400, 4, 3, 1).unwrap();
        let (inputs, outputs, _) = execute::<i32>(&plan, &shape, PlanOp::Sum, 3, 11).unwrap();
        assert!(count_wrong(c, &shape, PlanOp::Sum, &inputs, &outputs) > 0);
    }

    #[test]
    fn a_root_past_the_ranks_is_refused() {
        let mut options = crate::bench::report::tests::options(Collective::Broadcast);
        options.root = 3;
        assert!(run(&options, 3).unwrap_err().to_string().contains("--root 3"));
    }

    #[test]
    fn a_wrong_or_unwritten_element_is_counted() {
        let c = Collective::AllReduce;
        let (_, plan) = plan_for(c, 3, 0).unwrap().unwrap();
        let shape = c.shape(400, 4, 3, 0).unwrap();
        let (inputs, mut outputs, _) = execute::<i32>(&plan, &shape, PlanOp::Sum, 3, 11).unwrap();
        assert_eq!(count_wrong(c, &shape, PlanOp::Sum, &inputs, &outputs), 0);
        outputs[1].output[7] += 1;
        outputs[2].output[99] = i32::poison();
        assert_eq!(count_wrong(c, &shape, PlanOp::Sum, &inputs, &outputs), 2);
    }

    #[test]
    fn unsupported_pieces_are_said_not_faked() {
        assert!(plan_for(Collective::Reduce, 4, 0).is_none());
        assert!(plan_op(weft_types::ReduceOp::Avg).is_err());
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&mut [9.0, 1.0, 5.0]), (5.0, 1.0, 9.0));
        assert_eq!(spread(&mut [4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}

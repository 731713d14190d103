//! `weft soak` on a machine without a GPU: the soak's calls drawn as on a GPU, and those that
//! weft-plan's CPU reference interpreter can run (a collective with a shipped plan, a 32- or
//! 64-bit type, sum, prod, min or max) run there, `ranks` ranks as host threads, every element
//! of every rank checked ([`crate::harness::cpu_plan`]). The others, and what only a GPU has
//! (in place, graph replays, forced algorithms), are not run, and the output says so: this is
//! the plans' host model under random calls, not a soak of weft's kernels.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use weft_plan::ExecutionPlan;
use weft_plan::interp::ReduceOp as PlanOp;
use weft_types::DataType;

use super::SoakOptions;
use super::case::{Case, Generator, Limits};
use super::tally::{CallOutcome, Replay, Tally};
use crate::harness::cpu_plan::{HostElement, count_wrong, execute, plan_for, plan_op};
use crate::harness::rank::{Launch, Placement};
use crate::harness::{Collective, NcclTests};

type BoxError = Box<dyn std::error::Error>;

/// Largest buffer of a call on the CPU backend (the interpreter moves one element at a time).
const CPU_MAX_BYTES: usize = 64 << 10;

/// Runs the soak on the CPU backend with `ranks` ranks and prints its summary.
pub(super) fn run(options: &SoakOptions, ranks: usize) -> Result<ExitCode, BoxError> {
    println!("soak: no GPU here, so the CPU backend runs instead: weft-plan's reference interpreter, {ranks} ranks");
    println!("soak: as host threads, on the calls it can run (shipped plans; 32- and 64-bit types; sum, prod,");
    println!("soak: min, max; out of place, eager). This checks the plans, not weft's kernels.");
    let (calls, deadline): (Box<dyn Iterator<Item = u64>>, _) = match options.only_call {
        Some(k) => (Box::new(std::iter::once(k)), None),
        None => (Box::new(0..), Some(Instant::now() + options.duration())),
    };
    let (tally, not_run) = run_calls(options.seed, ranks, options.max_bytes, calls, deadline);
    println!(
        "soak: {not_run} drawn calls need a GPU (no plan, a 16- or 8-bit type, avg or premulsum) and were not run"
    );
    let replay = Replay { seed: options.seed, ranks, max_bytes: options.max_bytes };
    for (f, k) in tally.failures.iter().filter_map(|f| Some((f, f.index?))).take(20) {
        println!("FAIL call #{k}: {}: {} (replay: {})", f.case, f.detail, replay.command(k));
    }
    println!("{} (CPU reference interpreter)", tally.line(&replay));
    Ok(if tally.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Draws calls `indices` of the soak of `seed` for `ranks` ranks, until `deadline` if any, and
/// runs those the interpreter can: their tally, and how many drawn calls it could not run.
fn run_calls(
    seed: u64,
    ranks: usize,
    max_bytes: usize,
    indices: impl Iterator<Item = u64>,
    deadline: Option<Instant>,
) -> (Tally, u64) {
    let limits = Limits { ranks, max_bytes: max_bytes.min(CPU_MAX_BYTES), ll_slot_bytes: CPU_MAX_BYTES };
    let generator = Generator::new(limits);
    let plans = Plans::new(ranks as u32);
    let (mut tally, mut not_run) = (Tally::default(), 0u64);
    for index in indices {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        // What only a GPU has does not apply here: one eager launch, out of place, of the plan.
        let case = Case { placement: Placement::OutOfPlace, launch: Launch::Eager, ..generator.case(seed, index) };
        let plan = plans.of(&case);
        let Some(runnable) = runnable(&case, plan) else {
            not_run += 1;
            continue;
        };
        let name = plan.and_then(|p| p.as_ref().ok()).map_or("", |(name, _)| *name);
        let what = case.describe_as(&format!("plan {name} on the CPU"), "out of place, eager");
        let outcome = runnable.and_then(|(plan, op)| run_case(&case, plan, op, ranks, seed ^ index));
        tally.record_as(0, &case, &what, outcome);
    }
    (tally, not_run)
}

/// A shipped plan, by its `weft plan compile` name, or why it failed to build.
type Built = Result<(&'static str, ExecutionPlan), String>;

/// The shipped plan of every collective at every root (one root for those without), built once
/// for a soak: `None` where weft ships no plan.
struct Plans(Vec<((Collective, u32), Option<Built>)>);

impl Plans {
    fn new(ranks: u32) -> Self {
        let at_roots = |c: Collective| c.roots(ranks).map(move |root| (c, root));
        Self(
            Collective::ALL
                .into_iter()
                .flat_map(at_roots)
                .map(|(c, root)| ((c, root), plan_for(c, ranks, root)))
                .collect(),
        )
    }

    /// The plan of `case`'s collective at its root.
    fn of(&self, case: &Case) -> Option<&Built> {
        let key = (case.collective, case.shape.root);
        self.0.iter().find(|(k, _)| *k == key).and_then(|(_, plan)| plan.as_ref())
    }
}

/// The plan and operator that run `case` on the CPU, `None` when the interpreter cannot run it
/// (`Some(Err)`: the plan failed to build, a failure of the call).
fn runnable<'p>(case: &Case, plan: Option<&'p Built>) -> Option<Result<(&'p ExecutionPlan, PlanOp), String>> {
    let host_type = matches!(
        case.dtype,
        DataType::F32 | DataType::F64 | DataType::I32 | DataType::U32 | DataType::I64 | DataType::U64
    );
    let op = if case.collective.reduces() { plan_op(case.op.op()).ok()? } else { PlanOp::Sum };
    if !host_type {
        return None;
    }
    Some(plan?.as_ref().map(|(_, plan)| (plan, op)).map_err(Clone::clone))
}

/// Runs `case` once on the interpreter and counts every rank's wrong elements.
fn run_case(case: &Case, plan: &ExecutionPlan, op: PlanOp, ranks: usize, seed: u64) -> Result<CallOutcome, String> {
    fn checked<T: HostElement>(
        case: &Case,
        plan: &ExecutionPlan,
        op: PlanOp,
        ranks: usize,
        seed: u64,
    ) -> Result<CallOutcome, String> {
        let (inputs, outputs, micros) = execute::<T>(plan, &case.shape, op, ranks, seed)?;
        let wrong = count_wrong(case.collective, &case.shape, op, &inputs, &outputs);
        Ok(CallOutcome { wrong, identical: true, slowest: Duration::from_secs_f64(micros / 1e6) })
    }
    match case.dtype {
        DataType::F64 => checked::<f64>(case, plan, op, ranks, seed),
        DataType::I32 => checked::<i32>(case, plan, op, ranks, seed),
        DataType::U32 => checked::<u32>(case, plan, op, ranks, seed),
        DataType::I64 => checked::<i64>(case, plan, op, ranks, seed),
        DataType::U64 => checked::<u64>(case, plan, op, ranks, seed),
        _ => checked::<f32>(case, plan, op, ranks, seed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_backend_runs_the_calls_it_can_and_finds_no_wrong_element() {
        let (tally, not_run) = run_calls(3, 3, 4096, 0..300, None);
        assert!(tally.calls > 30, "only {} calls ran", tally.calls);
        assert_eq!(tally.calls + not_run, 300);
        assert!(tally.passed(), "{:?}", tally.failures);
        // A deadline already past runs nothing.
        assert_eq!(run_calls(3, 3, 4096, 0..300, Some(Instant::now())).0.calls, 0);
    }

    #[test]
    fn calls_without_a_plan_or_host_type_are_not_run() {
        let generator = Generator::new(Limits { ranks: 2, max_bytes: 4096, ll_slot_bytes: CPU_MAX_BYTES });
        let cases: Vec<Case> = (0..400).map(|k| generator.case(5, k)).collect();
        let plans = Plans::new(2);
        for c in &cases {
            let runs = runnable(c, plans.of(c)).is_some();
            let reduce_or_p2p = matches!(c.collective, Collective::Reduce | Collective::SendRecv);
            if reduce_or_p2p
                || c.dtype == DataType::Bf16
                || c.op.op() == weft_types::ReduceOp::Avg && c.collective.reduces()
            {
                assert!(!runs, "{}", c.describe());
            }
        }
    }
}

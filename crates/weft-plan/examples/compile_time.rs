//! Prints how long compiling some shipped plans takes (release build recommended).

use std::time::Instant;

use weft_plan::{DslError, Program, plans};

/// Builds a traced program.
type Build = Box<dyn Fn() -> Result<Program, DslError>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cases: Vec<(&str, Build)> = vec![
        ("ring_allreduce(8, 4)", Box::new(|| plans::ring_allreduce(8, 4))),
        ("allpairs_allreduce(8, 1)", Box::new(|| plans::allpairs_allreduce(8, 1))),
        ("hierarchical_allreduce(8, 4, 1)", Box::new(|| plans::hierarchical_allreduce(8, 4, 1))),
        ("ring_allgather(8, 1)", Box::new(|| plans::ring_allgather(8, 1))),
        ("ring_reduce_scatter(8, 1)", Box::new(|| plans::ring_reduce_scatter(8, 1))),
        ("two_step_alltoall(8, 4, 1)", Box::new(|| plans::two_step_alltoall(8, 4, 1))),
        ("alltonext(8, 4, 1)", Box::new(|| plans::alltonext(8, 4, 1))),
        ("ring_allreduce(64, 1)", Box::new(|| plans::ring_allreduce(64, 1))),
        ("hierarchical_allreduce(64, 8, 1)", Box::new(|| plans::hierarchical_allreduce(64, 8, 1))),
        ("two_step_alltoall(64, 8, 1)", Box::new(|| plans::two_step_alltoall(64, 8, 1))),
    ];
    for (name, build) in cases {
        let start = Instant::now();
        let program = build()?;
        let traced = start.elapsed();
        let plan = program.compile()?;
        println!(
            "{name}: trace {:.1} ms, compile+verify {:.1} ms, {} ops",
            traced.as_secs_f64() * 1e3,
            (start.elapsed() - traced).as_secs_f64() * 1e3,
            plan.op_count()
        );
    }
    Ok(())
}

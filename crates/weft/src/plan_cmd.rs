//! `weft plan compile | verify | show`: the algorithm DSL's shipped plans from the command line.

use std::path::Path;
use std::time::Instant;

use weft_plan::{AnyProgram, Collective, ExecutionPlan, plans};

type BoxError = Box<dyn std::error::Error>;

/// Names `weft plan compile` accepts.
pub const ALGORITHMS: &[&str] = &[
    "ring-allreduce",
    "allpairs-allreduce",
    "ring-allreduce-ll",
    "allpairs-allreduce-ll",
    "reduce-broadcast-allreduce",
    "hierarchical-allreduce",
    "ring-allgather",
    "ring-reduce-scatter",
    "allpairs-reduce-scatter",
    "two-step-alltoall",
    "alltonext",
    "direct-broadcast",
    "port-allpairs-allreduce",
];

/// Traces shipped algorithm `name` for `ranks` ranks.
pub fn program(name: &str, ranks: u32, ranks_per_node: u32, instances: u32, root: u32) -> Result<AnyProgram, BoxError> {
    Ok(match name {
        "ring-allreduce" => plans::ring_allreduce(ranks, instances)?.into(),
        "allpairs-allreduce" => plans::allpairs_allreduce(ranks, instances)?.into(),
        "ring-allreduce-ll" => plans::ring_allreduce_ll(ranks, instances)?.into(),
        "allpairs-allreduce-ll" => plans::allpairs_allreduce_ll(ranks, instances)?.into(),
        "reduce-broadcast-allreduce" => plans::reduce_broadcast_allreduce(ranks, instances)?.into(),
        "hierarchical-allreduce" => plans::hierarchical_allreduce(ranks, ranks_per_node, instances)?.into(),
        "ring-allgather" => plans::ring_allgather(ranks, instances)?.into(),
        "ring-reduce-scatter" => plans::ring_reduce_scatter(ranks, instances)?.into(),
        "allpairs-reduce-scatter" => plans::allpairs_reduce_scatter(ranks, instances)?.into(),
        "two-step-alltoall" => plans::two_step_alltoall(ranks, ranks_per_node, instances)?.into(),
        "alltonext" => plans::alltonext(ranks, ranks_per_node, instances)?.into(),
        "direct-broadcast" => plans::direct_broadcast(ranks, root, instances)?.into(),
        "port-allpairs-allreduce" => plans::port_allpairs_allreduce(ranks)?.into(),
        other => return Err(format!("unknown algorithm {other:?}; one of {}", ALGORITHMS.join(", ")).into()),
    })
}

/// Compiles a shipped algorithm; prints the JSON plan or writes it to `out`.
pub fn compile(program: &AnyProgram, out: Option<&Path>) -> Result<(), BoxError> {
    let started = Instant::now();
    let plan = program.compile()?;
    let elapsed = started.elapsed();
    let json = plan.to_json()?;
    match out {
        Some(path) => {
            std::fs::write(path, json)?;
            eprintln!(
                "compiled {} ({} ops) in {:.2} ms -> {}",
                plan.name,
                plan.op_count(),
                elapsed.as_secs_f64() * 1e3,
                path.display()
            );
        }
        None => println!("{json}"),
    }
    Ok(())
}

/// Loads a plan (every limit validated), verifies it computes the collective it names and says
/// whether it is also verified in place.
pub fn verify(path: &Path) -> Result<(), BoxError> {
    let plan = ExecutionPlan::load(&std::fs::read_to_string(path)?)?;
    let collective = Collective::from_plan(&plan)?;
    weft_plan::passes::verify(&plan, &collective)?;
    println!("{}: {} on {} ranks, {} ops: verified", path.display(), plan.name, plan.nranks, plan.op_count());
    // In place is a property, not a requirement: the executor stages calls of plans without it.
    match weft_plan::passes::verify_in_place(&plan, &collective) {
        Ok(()) => println!("  in place: verified (peers may write the user buffers directly)"),
        Err(e) => println!("  in place: not verified, such calls stage their output: {e}"),
    }
    Ok(())
}

/// Prints a plan's per-rank, per-thread-block listing; writes its operation DAG as DOT and/or
/// SVG, and warns of operations that never run (a cycle of waits).
pub fn show(path: &Path, dot: Option<&Path>, svg: Option<&Path>) -> Result<(), BoxError> {
    let plan = ExecutionPlan::load(&std::fs::read_to_string(path)?)?;
    print!("{}", plan.listing());
    if dot.is_none() && svg.is_none() {
        return Ok(());
    }
    let graph = plan.graph();
    for (out, text) in [(dot, graph.to_dot()), (svg, graph.to_svg())] {
        if let Some(out) = out {
            std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
            eprintln!("drew {} operations, {} edges -> {}", graph.nodes.len(), graph.edges.len(), out.display());
        }
    }
    let stuck: Vec<String> =
        graph.deadlocked().map(|n| format!("rank {} tb {} op {} ({})", n.rank, n.tb, n.step, n.name)).collect();
    if !stuck.is_empty() {
        eprintln!("warning: {} operations never run (a cycle of waits): {}", stuck.len(), stuck.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_algorithm_compiles_verifies_and_lists() {
        let dir = std::env::temp_dir().join(format!("weft-plan-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ALGORITHMS {
            let path = dir.join(format!("{name}.json"));
            compile(&program(name, 4, 2, 1, 1).unwrap(), Some(&path)).unwrap();
            let (dot, svg) = (dir.join(format!("{name}.dot")), dir.join(format!("{name}.svg")));
            show(&path, Some(&dot), Some(&svg)).unwrap();
            assert!(std::fs::read_to_string(&dot).unwrap().starts_with("digraph plan {"));
            assert!(std::fs::read_to_string(&svg).unwrap().trim_end().ends_with("</svg>"));
            if *name == "alltonext" {
                // A custom collective: its postcondition lives with the program, not the file.
                assert!(verify(&path).unwrap_err().to_string().contains("custom"));
            } else {
                verify(&path).unwrap();
            }
        }
        assert!(program("ring", 4, 2, 1, 0).is_err());
        std::fs::write(dir.join("bad.json"), "{\"version\": 99}").unwrap();
        assert!(verify(&dir.join("bad.json")).unwrap_err().to_string().contains("version"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
